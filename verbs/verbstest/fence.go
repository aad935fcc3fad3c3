package verbstest

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// The dereg fence (verbs.MR): once Dereg returns, the provider reads and
// writes nothing of the region; an access in flight either finished
// before, or fails at the requester. Each case deregisters the target
// while a large access is under way, fills the memory with a secret as a
// program reusing it would, and checks that nothing of the access landed
// there afterwards, and nothing of the secret left.

func init() {
	register("DeregFenceWrite", testDeregFenceWrite)
	register("DeregFenceRead", testDeregFenceRead)
}

const (
	fenceSize   = 8 << 20
	fencePublic = 0x11 // the target's bytes before Dereg
	fenceSent   = 0x55 // what a WRITE carries
	fenceSecret = 0xee // the target's bytes after Dereg
)

func fenceOpts() pairOpts {
	o := defaultOpts()
	o.memSize = fenceSize
	return o
}

func fillByte(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// fenceCompletion waits for the access's completion. A failed access may
// complete only after the transport's retries (a NIC's responder may stop
// answering a region it no longer has), and an emulated device moves the
// megabytes slowly: four of the suite's timeouts. Without one, it fails the
// test if must, and reports false otherwise.
func (s *suite) fenceCompletion(t *testing.T, cq verbs.CQ, must bool) (verbs.WC, bool) {
	t.Helper()
	wc := make([]verbs.WC, 1)
	wait := 4 * s.cfg.Timeout
	if !must {
		wait = s.cfg.Timeout // a provider known to stall: no need to wait long
	}
	deadline := time.Now().Add(wait)
	for {
		n, err := cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			return wc[0], true
		}
		if !time.Now().Before(deadline) {
			require.False(t, must, "the access never completed")
			return verbs.WC{}, false
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// indexOther is the index of the first byte of b that is not v, or -1.
func indexOther(b []byte, v byte) int {
	for i, c := range b {
		if c != v {
			return i
		}
	}
	return -1
}

// deregTarget deregisters the server's region and fills it with the
// secret; the endpoint's release then has no MR left to deregister.
func deregTarget(t *testing.T, sv *endpoint) {
	t.Helper()
	sv.mu.Lock()
	defer sv.mu.Unlock()
	require.NoError(t, sv.mr.Dereg())
	sv.mr = nil
	fillByte(sv.buf, fenceSecret)
}

// fence is one way to end the peer's access to sv's memory at addr and
// rkey: deregistering the region, or invalidating a window over it. cut
// ends the access and fills the memory with the secret; mem and after name
// the memory and the moment the fence holds, for the failures' messages.
type fence struct {
	addr  uint64
	rkey  uint32
	cut   func()
	mem   string
	after string
}

func testDeregFenceWrite(t *testing.T, s *suite) {
	c, sv, f := s.deregFence(t)
	s.fenceWrite(t, c, sv, f)
}

func testDeregFenceRead(t *testing.T, s *suite) {
	c, sv, f := s.deregFence(t)
	s.fenceRead(t, c, sv, f)
}

// deregFence makes a pair and the fence that deregisters the server's
// region.
func (s *suite) deregFence(t *testing.T) (c, sv *endpoint, f fence) {
	c, sv = s.pair(t, fenceOpts())
	return c, sv, fence{addr: sv.mr.Addr(), rkey: sv.mr.RKey(), cut: func() { deregTarget(t, sv) },
		mem: "the region", after: "Dereg returned"}
}

// fenceWrite has c WRITE all its memory through f, cuts the access once it
// has started to land (or has landed), and checks that nothing of it
// landed afterwards.
func (s *suite) fenceWrite(t *testing.T, c, sv *endpoint, f fence) {
	t.Helper()
	fillByte(c.buf, fenceSent)
	fillByte(sv.buf, fencePublic)
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf)}, RemoteAddr: f.addr, RKey: f.rkey})
	deadline := time.Now().Add(s.cfg.Timeout)
	for sv.buf[0] != fenceSent && time.Now().Before(deadline) {
		time.Sleep(10 * time.Microsecond)
	}
	f.cut()
	// Whatever its status, once the WRITE completed at the requester no
	// more of it is on its way.
	wc, _ := s.fenceCompletion(t, c.scq, true)
	require.Equal(t, uint64(1), wc.WRID)
	require.Contains(t, []verbs.WCStatus{verbs.WCSuccess, verbs.WCRemAccessErr, verbs.WCRetryExcErr, verbs.WCWRFlushErr}, wc.Status)
	t.Logf("WRITE %v", wc.Status)
	time.Sleep(20 * time.Millisecond)
	if i := indexOther(sv.buf, fenceSecret); i >= 0 {
		t.Fatalf("byte %d of %s changed after %s (WRITE %v)", i, f.mem, f.after, wc.Status)
	}
}

// fenceRead has c READ all of sv's memory through f, cuts the access while
// the response is under way (or done), and checks that nothing of the
// secret reached c.
func (s *suite) fenceRead(t *testing.T, c, sv *endpoint, f fence) {
	t.Helper()
	fillByte(c.buf, 0)
	fillByte(sv.buf, fencePublic)
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf)}, RemoteAddr: f.addr, RKey: f.rkey})
	time.Sleep(time.Millisecond)
	f.cut()
	wc, ok := s.fenceCompletion(t, c.scq, s.cfg.DeregReadStalls == "")
	if !ok {
		t.Logf("no completion for the READ: %s; flushing it", s.cfg.DeregReadStalls)
		require.NoError(t, c.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
		wc, _ = s.fenceCompletion(t, c.scq, true)
	}
	require.Equal(t, uint64(2), wc.WRID)
	t.Logf("READ %v", wc.Status)
	require.Contains(t, []verbs.WCStatus{verbs.WCSuccess, verbs.WCRemAccessErr, verbs.WCRetryExcErr, verbs.WCWRFlushErr, verbs.WCRemOpErr}, wc.Status)
	if i := bytes.IndexByte(c.buf, fenceSecret); i >= 0 {
		t.Fatalf("the requester received byte %d of what %s held after %s (READ %v)", i, f.mem, f.after, wc.Status)
	}
	if wc.Status == verbs.WCSuccess {
		require.Equal(t, -1, indexOther(c.buf, fencePublic), "a READ that succeeded carries %s as it was", f.mem)
	}
}
