package soft_test

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

func init() { testsupport.RegisterPeer("soft-pause", pauseChild) }

// pauseAckTimeout is the QPs' transport timeout exponent in the pause
// tests: 4.096 us * 2^10 = 4.2 ms per try, so that with a retry count of 7
// the retry window is 34 ms, and a pause of pauseFor is 60 of them: what
// a pause of two minutes is to rdma.Conn's 2.1 s window (endpoint.go),
// scaled down to fit the test budget.
const (
	pauseAckTimeout = 10
	pauseFor        = 2 * time.Second
)

// pauseRetryWindow is the retry window of pauseAckTimeout with 7 retries.
const pauseRetryWindow = 8 * 4096 * (1 << pauseAckTimeout) * time.Nanosecond

// pauseChild runs in a peer process: connect to the address in args[0]
// and echo every SEND back as a SEND, until the connection ends.
func pauseChild(args []string) int {
	p, _ := verbs.Lookup("soft")
	ch, err := p.CreateEventChannel()
	if err != nil {
		return 3
	}
	dst, err := net.ResolveTCPAddr("tcp", args[0])
	if err != nil {
		return 3
	}
	id, pd, cq, qp, code := soft.ChildQP(ch, dst)
	if code != 0 {
		return code
	}
	mem, err := verbs.AllocMemory(4096)
	if err != nil {
		return 4
	}
	mr, err := pd.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	if err != nil {
		return 4
	}
	buf := mem.Bytes()[:64]
	if qp.PostRecv([]verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(mr, buf)}}}) != nil {
		return 4
	}
	_ = id.SetAckTimeout(pauseAckTimeout)
	if id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}) != nil {
		return 5
	}
	if ev, err := ch.GetEvent(time.Now().Add(5 * time.Second)); err != nil || ev.Type != verbs.EventEstablished {
		return 5
	}
	wc := make([]verbs.WC, 4)
	for {
		n, err := cq.Poll(wc)
		if err != nil {
			return 6
		}
		for _, w := range wc[:n] {
			if w.Status != verbs.WCSuccess {
				return 0 // the connection ended
			}
			if w.Opcode != verbs.WCRecv {
				continue
			}
			out := mem.Bytes()[64 : 64+w.ByteLen]
			copy(out, buf[:w.ByteLen])
			if qp.PostRecv([]verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(mr, buf)}}}) != nil ||
				qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(mr, out)}}}) != nil {
				return 6
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// A peer process stopped for 60 times the transport's retry window (the
// window scaled down: pauseAckTimeout), with a SEND of ours outstanding
// all along: on each of soft's paths the connection survives, the SEND
// completes once the peer runs again, and its echo comes back. The time
// went by as peer stalls (the transport answered), not retries.
func TestPeerProcessPaused(t *testing.T) {
	for _, path := range []struct {
		name string
		shm  bool
	}{{"tcp", false}, {"shm", true}} {
		t.Run(path.name, func(t *testing.T) {
			defer soft.SetSharedMemory(soft.SetSharedMemory(path.shm))
			defer soft.SetSharedMemorySwitch(soft.SetSharedMemorySwitch(0))
			testPeerProcessPaused(t, path.shm, path.name)
		})
	}
}

func testPeerProcessPaused(t *testing.T, shm bool, carrier string) {
	p, err := verbs.Lookup("soft")
	require.NoError(t, err)
	ch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer ch.Close()
	lid, err := ch.CreateID()
	require.NoError(t, err)
	defer lid.Destroy()
	require.NoError(t, lid.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}))
	require.NoError(t, lid.Listen(4))

	cmd := testsupport.StartPeer(t, "soft-pause", []string{"RDMA_SOFT_SHM=" + strconv.FormatBool(shm), "RDMA_SOFT_SHM_SWITCH=0"},
		lid.LocalAddr().String())
	defer func() { _ = cmd.Process.Signal(syscall.SIGCONT) }()

	req, err := ch.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventConnectRequest, req.Type)
	defer req.ID.Destroy()
	ctx := req.ID.Context()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	defer cq.Destroy()
	qp, err := req.ID.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	defer qp.Destroy()
	mem, err := verbs.AllocMemory(4096)
	require.NoError(t, err)
	defer mem.Free()
	mr, err := pd.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	defer mr.Dereg()
	require.NoError(t, req.ID.SetAckTimeout(pauseAckTimeout))
	require.NoError(t, req.ID.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	ev, err := ch.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventEstablished, ev.Type)
	a, err := qp.Query()
	require.NoError(t, err)
	require.Equal(t, pauseAckTimeout, a.Timeout)
	require.Equal(t, 7, a.RetryCnt)

	in, out := mem.Bytes()[:64], mem.Bytes()[64:128]
	wc := make([]verbs.WC, 4)
	// roundTrip sends msg and waits for the send's completion and the
	// echo, within limit.
	roundTrip := func(msg string, limit time.Duration) {
		t.Helper()
		require.NoError(t, qp.PostRecv([]verbs.RecvWR{{WRID: 2, SG: []verbs.SGE{verbs.SGEOf(mr, in)}}}))
		n := copy(out, msg)
		require.NoError(t, qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(mr, out[:n])}}}))
		end := time.Now().Add(limit)
		got := 0
		for got < 2 {
			k, err := cq.Poll(wc)
			require.NoError(t, err)
			for _, w := range wc[:k] {
				require.Equal(t, verbs.WCSuccess, w.Status, "%s: WR %d", msg, w.WRID)
				if w.WRID == 2 {
					assert.Equal(t, msg, string(in[:w.ByteLen]))
				}
				got++
			}
			require.True(t, time.Now().Before(end), "%s: no echo within %v", msg, limit)
			time.Sleep(time.Millisecond)
		}
	}
	roundTrip("before the pause", 10*time.Second)
	// A connection moves to shared memory once its first frames are out.
	require.Eventually(t, func() bool { return soft.Carrier(qp) == carrier }, 5*time.Second, time.Millisecond, "carried by %s", carrier)

	before := soft.ReadCounters()
	testsupport.Stop(t, cmd.Process)
	start := time.Now()
	require.NoError(t, qp.PostRecv([]verbs.RecvWR{{WRID: 2, SG: []verbs.SGE{verbs.SGEOf(mr, in)}}}))
	n := copy(out, "during the pause")
	require.NoError(t, qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(mr, out[:n])}}}))
	for time.Since(start) < pauseFor {
		k, err := cq.Poll(wc)
		require.NoError(t, err)
		require.Zero(t, k, "a completion while the peer is stopped: %+v", wc[0])
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("peer stopped for %v, %.0f retry windows", time.Since(start), float64(time.Since(start))/float64(pauseRetryWindow))
	end := time.Now().Add(10 * time.Second)
	for got := 0; got < 2; {
		k, err := cq.Poll(wc)
		require.NoError(t, err)
		for _, w := range wc[:k] {
			require.Equal(t, verbs.WCSuccess, w.Status, "WR %d after the pause", w.WRID)
			if w.WRID == 2 {
				assert.Equal(t, "during the pause", string(in[:w.ByteLen]))
			}
			got++
		}
		require.True(t, time.Now().Before(end), "no echo within 10 s of the peer's resumption")
		time.Sleep(time.Millisecond)
	}
	roundTrip("after the pause", 10*time.Second)
	c := soft.ReadCounters()
	assert.Zero(t, c.RetryExceeded-before.RetryExceeded)
	assert.Greater(t, c.PeerStalls-before.PeerStalls, uint64(a.RetryCnt+1),
		"the pause went by as the watchdog's peer stalls, more than a retry count's worth")
	require.NoError(t, req.ID.Disconnect())
}
