package verbstest

import (
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// Type 2 memory windows (verbs.MW): the rules rxe keeps
// (drivers/infiniband/sw/rxe/rxe_mw.c) and the fence the verbs package
// promises. The server's region is registered with local access and
// AccessMWBind only, so that a window is the peer's only way in. Every case
// skips on a device without windows (DeviceAttr.MaxMW 0).

func init() {
	register("MWAllocDealloc", testMWAllocDealloc)
	register("MWRead", testMWRead)
	register("MWWrite", testMWWrite)
	register("MWBounds", testMWBounds)
	register("MWAccess", testMWAccess)
	register("MWNotALocalKey", testMWNotALocalKey)
	register("MWInvalidate", testMWInvalidate)
	register("MWRebind", testMWRebind)
	register("MWOtherQP", testMWOtherQP)
	register("MWBindNoMWBindAccess", testMWBindNoMWBindAccess)
	register("MWBindBound", testMWBindBound)
	register("MWBindZeroLength", testMWBindZeroLength)
	register("MWDealloc", testMWDealloc)
	register("MWDeregBound", testMWDeregBound)
	register("MWFenceRead", testMWFenceRead)
	register("MWFenceWrite", testMWFenceWrite)
	register("MWZeroAllocDataPath", testMWZeroAllocDataPath)
}

// needMW skips the test on a device without memory windows.
func (s *suite) needMW(t *testing.T) {
	t.Helper()
	attr, err := s.device(t).Query()
	require.NoError(t, err)
	if attr.MaxMW == 0 {
		t.Skip("the device has no memory windows (DeviceAttr.MaxMW is 0)")
	}
}

// mwAccess is the regions' access in these cases: no remote access but
// through a window.
const mwAccess = verbs.AccessLocalWrite | verbs.AccessMWBind

func mwOpts() pairOpts {
	o := defaultOpts()
	o.access = mwAccess
	return o
}

// allocMW allocates a window in e's PD, deallocated at cleanup (before
// the endpoints are released) unless the test did.
// windowPair makes a pair for the window cases and a window in the
// server's PD; it skips the test on a provider without windows.
func (s *suite) windowPair(t *testing.T) (c, sv *endpoint, w verbs.MW) {
	t.Helper()
	s.needMW(t)
	c, sv = s.pair(t, mwOpts())
	return c, sv, allocMW(t, sv)
}

func allocMW(t *testing.T, e *endpoint) verbs.MW {
	t.Helper()
	w, err := e.pd.AllocMW()
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := w.Dealloc(); err != nil {
			require.ErrorIs(t, err, verbs.ErrClosed)
		}
	})
	return w
}

// bindWR is a signaled bind of w to buf in e's region, under the next rkey.
func bindWR(e *endpoint, w verbs.MW, wrid uint64, buf []byte, access verbs.Access) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled,
		Bind: &verbs.MWBind{MW: w, MR: e.mr, Addr: verbs.AddrOf(buf), Length: uint64(len(buf)),
			Access: access, RKey: verbs.NextRKey(w.RKey())}}
}

// bind binds w to buf on e's QP and returns the window's rkey.
func (s *suite) bind(t *testing.T, e *endpoint, w verbs.MW, buf []byte, access verbs.Access) uint32 {
	t.Helper()
	wr := bindWR(e, w, 1000, buf, access)
	postSend(t, e, wr)
	wc := s.pollOne(t, e.scq, verbs.WCSuccess)
	require.Equal(t, uint64(1000), wc.WRID)
	require.Equal(t, verbs.WCBindMW, wc.Opcode)
	require.Equal(t, wr.Bind.RKey, w.RKey(), "RKey is the latest bind's")
	return wr.Bind.RKey
}

// invalidate invalidates rkey on e's QP and waits for the completion.
func (s *suite) invalidate(t *testing.T, e *endpoint, rkey uint32) {
	t.Helper()
	postSend(t, e, verbs.SendWR{WRID: 2000, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey})
	wc := s.pollOne(t, e.scq, verbs.WCSuccess)
	require.Equal(t, uint64(2000), wc.WRID)
	require.Equal(t, verbs.WCLocalInv, wc.Opcode)
}

// readVia READs len(dst) bytes at raddr under rkey into dst (in c's
// region) and checks the completion's status.
func (s *suite) readVia(t *testing.T, c *endpoint, dst []byte, raddr uint64, rkey uint32, want verbs.WCStatus) {
	t.Helper()
	postSend(t, c, verbs.SendWR{WRID: 3000, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, dst)}, RemoteAddr: raddr, RKey: rkey})
	wc := s.pollOne(t, c.scq, want)
	require.Equal(t, uint64(3000), wc.WRID)
}

// readFault is a READ through rkey that must fail at the responder.
func (s *suite) readFault(t *testing.T, c, sv *endpoint, raddr uint64, rkey uint32) {
	t.Helper()
	s.remoteFault(t, c, sv, verbs.SendWR{Opcode: verbs.OpRDMARead, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: raddr, RKey: rkey}, verbs.WCRemAccessErr)
}

func testMWAllocDealloc(t *testing.T, s *suite) {
	s.needMW(t)
	ctx := s.device(t)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	w1, err := pd.AllocMW()
	require.NoError(t, err)
	w2, err := pd.AllocMW()
	require.NoError(t, err)
	require.NotEqual(t, w1.RKey()>>8, w2.RKey()>>8, "each window has an rkey index of its own")
	err = pd.Dealloc()
	require.Error(t, err, "a PD with windows cannot be deallocated")
	require.ErrorIs(t, err, syscall.EBUSY)
	require.NoError(t, w1.Dealloc())
	require.NoError(t, w2.Dealloc())
	require.NoError(t, pd.Dealloc())
}

func testMWRead(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[8192 : 8192+10000]
	fill(win, 3)
	postRecv(t, c, 1, 0, 64)
	postRecv(t, c, 2, 64, 64)
	// The bind, and the SEND that tells the peer its rkey, go in one post:
	// the SEND executes after the bind, so the peer's READ finds the
	// window bound. A SEND ahead of the bind completes ahead of it.
	bind := bindWR(sv, w, 10, win, verbs.AccessRemoteRead)
	msg := sv.buf[:16]
	binary.LittleEndian.PutUint32(msg, bind.Bind.RKey)
	binary.LittleEndian.PutUint64(msg[8:], verbs.AddrOf(win))
	require.NoError(t, sv.qp.PostSend([]verbs.SendWR{
		{WRID: 9, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(sv.mr, sv.buf[16:32])}},
		bind,
		{WRID: 11, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(sv.mr, msg)}}}))
	wcs := s.poll(t, sv.scq, 3)
	for i, wc := range wcs {
		require.Equal(t, uint64(9+i), wc.WRID, "completions in posting order: %+v", wcs)
		require.Equal(t, verbs.WCSuccess, wc.Status, "WR %d: %v", wc.WRID, wc.Status)
	}
	require.Equal(t, verbs.WCBindMW, wcs[1].Opcode)
	require.Equal(t, bind.Bind.RKey, w.RKey())
	s.pollOne(t, c.rcq, verbs.WCSuccess)
	s.pollOne(t, c.rcq, verbs.WCSuccess)
	rkey := binary.LittleEndian.Uint32(c.buf[64:68])
	raddr := binary.LittleEndian.Uint64(c.buf[72:80])
	dst := c.buf[65536 : 65536+len(win)]
	s.readVia(t, c, dst, raddr, rkey, verbs.WCSuccess)
	require.Equal(t, win, dst)
	// A part of the window, from inside it.
	part := c.buf[200000 : 200000+1000]
	s.readVia(t, c, part, raddr+5000, rkey, verbs.WCSuccess)
	require.Equal(t, win[5000:6000], part)
}

func testMWWrite(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[16384 : 16384+8000]
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteWrite)
	src := c.buf[:5000]
	fill(src, 7)
	postSend(t, c, verbs.SendWR{WRID: 5, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: verbs.AddrOf(win) + 1000, RKey: rkey})
	wc := s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, verbs.WCRDMAWrite, wc.Opcode)
	require.Equal(t, src, win[1000:6000])
	require.Equal(t, make([]byte, 1000), win[:1000], "nothing outside the target changed")
}

func testMWBounds(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[8192 : 8192+4096]
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	s.readVia(t, c, c.buf[:4096], verbs.AddrOf(win), rkey, verbs.WCSuccess)
	attr, err := s.device(t).Query()
	require.NoError(t, err)
	if attr.VendorID == rxeVendorID {
		// Soft-RoCE checks an access through a window against the
		// window's region (check_rkey in rxe_resp.c: mr_check_range on
		// mw->mr), so a READ past the window's end inside the region
		// succeeds. For this rdma.Conn uses no windows on rxe unless
		// asked, and then binds them only to whole Buffers; a kernel that
		// checks the window fails here, and that rule can go.
		s.readVia(t, c, c.buf[:64], verbs.AddrOf(win)+4096-32, rkey, verbs.WCSuccess)
		t.Log("rxe: an access past the window's end, inside its region, succeeds")
		return
	}
	// The region goes on past the window's end; the window does not.
	s.readFault(t, c, sv, verbs.AddrOf(win)+4096-32, rkey)
}

// rxeVendorID is the vendor ID Soft-RoCE reports.
const rxeVendorID = 0xffffff

func testMWAccess(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[:4096]
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	// A window bound for READ takes no WRITE.
	s.remoteFault(t, c, sv, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(win), RKey: rkey}, verbs.WCRemAccessErr)
}

func testMWNotALocalKey(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[:4096]
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	postRecv(t, c, 1, 0, 64)
	// A window's rkey is no lkey: an SGE naming it is a local protection
	// fault, whatever it covers.
	postSend(t, sv, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{{Addr: verbs.AddrOf(win), Length: 64, LKey: rkey}}})
	wc := s.poll(t, sv.scq, 1)[0]
	require.Equal(t, uint64(1), wc.WRID)
	require.Contains(t, []verbs.WCStatus{verbs.WCLocProtErr, verbs.WCLocQPOpErr}, wc.Status, "got %v", wc.Status)
}

func testMWInvalidate(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[4096 : 4096+4096]
	fill(win, 1)
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	s.readVia(t, c, c.buf[:4096], verbs.AddrOf(win), rkey, verbs.WCSuccess)
	require.Equal(t, win, c.buf[:4096])
	s.invalidate(t, sv, rkey)
	s.readFault(t, c, sv, verbs.AddrOf(win), rkey)
}

func testMWRebind(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[:4096]
	k1 := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	s.readVia(t, c, c.buf[:64], verbs.AddrOf(win), k1, verbs.WCSuccess)
	s.invalidate(t, sv, k1)
	k2 := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	require.Equal(t, verbs.NextRKey(k1), k2)
	require.NotEqual(t, k1, k2)
	s.readVia(t, c, c.buf[:64], verbs.AddrOf(win), k2, verbs.WCSuccess)
	// A peer that kept the first bind's rkey finds nothing.
	s.readFault(t, c, sv, verbs.AddrOf(win), k1)
}

func testMWOtherQP(t *testing.T, s *suite) {
	s.needMW(t)
	lch, lid := s.listener(t)
	c, sv := s.pairOn(t, lch, lid, mwOpts())
	// A second connection whose server QP is in the same PD: the window's
	// rkey is found there, and still refused, because it was bound on the
	// first connection's QP.
	o := mwOpts()
	o.serverPD = sv.pd
	c2, sv2 := s.pairOn(t, lch, lid, o)
	w := allocMW(t, sv)
	win := sv.buf[:4096]
	fill(win, 5)
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	s.readVia(t, c, c.buf[:4096], verbs.AddrOf(win), rkey, verbs.WCSuccess)
	s.readFault(t, c2, sv2, verbs.AddrOf(win), rkey)
	// The first connection and its window are untouched.
	clear(c.buf[:4096])
	s.readVia(t, c, c.buf[:4096], verbs.AddrOf(win), rkey, verbs.WCSuccess)
	require.Equal(t, win, c.buf[:4096])
}

// bindFails posts wr (a bind that must fail) and a SEND behind it on e,
// and checks the completions: a bind error, then a flush; the QP in ERR,
// where a bind posted afterwards is flushed.
func (s *suite) bindFails(t *testing.T, e *endpoint, wr verbs.SendWR) {
	t.Helper()
	s.failThenFlush(t, e, wr, verbs.WCMWBindErr)
	wr.WRID = 2
	postSend(t, e, wr)
	wc := s.poll(t, e.scq, 1)[0]
	require.Equal(t, uint64(2), wc.WRID)
	require.Equal(t, verbs.WCWRFlushErr, wc.Status)
}

func testMWBindNoMWBindAccess(t *testing.T, s *suite) {
	s.needMW(t)
	_, sv := s.pair(t, defaultOpts()) // regions without AccessMWBind
	w := allocMW(t, sv)
	s.bindFails(t, sv, bindWR(sv, w, 10, sv.buf[:4096], verbs.AccessRemoteRead))
}

func testMWBindBound(t *testing.T, s *suite) {
	_, sv, w := s.windowPair(t)
	s.bind(t, sv, w, sv.buf[:4096], verbs.AccessRemoteRead)
	// A type 2 window binds only while it is free (IBA o10-37.2.30).
	s.bindFails(t, sv, bindWR(sv, w, 10, sv.buf[4096:8192], verbs.AccessRemoteRead))
}

func testMWBindZeroLength(t *testing.T, s *suite) {
	_, sv, w := s.windowPair(t)
	// Binding no bytes is not how a type 2 window is unbound (IBA
	// o10-37.2.40): OpLocalInv is.
	s.bindFails(t, sv, bindWR(sv, w, 10, sv.buf[:0], verbs.AccessRemoteRead))
}

func testMWDealloc(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[:4096]
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	s.readVia(t, c, c.buf[:64], verbs.AddrOf(win), rkey, verbs.WCSuccess)
	require.NoError(t, w.Dealloc())
	s.readFault(t, c, sv, verbs.AddrOf(win), rkey)
}

func testMWDeregBound(t *testing.T, s *suite) {
	c, sv, w := s.windowPair(t)
	win := sv.buf[:4096]
	fill(win, 9)
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead)
	// A region with windows bound cannot be deregistered (IBA 10.6.7.2.6;
	// rxe answers EINVAL), and stays as it was.
	err := sv.mr.Dereg()
	require.Error(t, err)
	require.ErrorIs(t, err, syscall.EINVAL)
	s.readVia(t, c, c.buf[:4096], verbs.AddrOf(win), rkey, verbs.WCSuccess)
	require.Equal(t, win, c.buf[:4096])
	// Once the window is invalidated it can.
	s.invalidate(t, sv, rkey)
	sv.mu.Lock()
	defer sv.mu.Unlock()
	require.NoError(t, sv.mr.Dereg())
	sv.mr = nil
}

// The fence (verbs.MW): once the invalidation's completion is polled, the
// provider reads and writes nothing through the window, even for an access
// in flight. As DeregFenceRead and DeregFenceWrite do for a region, each
// case invalidates the window under a large access, fills the memory with
// a secret, and checks that nothing of the access landed afterwards and
// nothing of the secret left. The region stays registered throughout.

// invalidateTarget invalidates the window on sv, waits for the completion
// and fills sv's memory with the secret.
func (s *suite) invalidateTarget(t *testing.T, sv *endpoint, rkey uint32) {
	t.Helper()
	// The invalidation may complete flushed: the access it cut off made
	// the responder's QP go to error first (rxe executes the invalidation
	// and then flushes its completion). Either way, once it is polled,
	// nothing reaches the window: it is invalid, or its QP is in error.
	postSend(t, sv, verbs.SendWR{WRID: 2000, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey})
	wc := s.poll(t, sv.scq, 1)[0]
	require.Equal(t, uint64(2000), wc.WRID)
	require.Contains(t, []verbs.WCStatus{verbs.WCSuccess, verbs.WCWRFlushErr}, wc.Status, "the invalidation: %v", wc.Status)
	fillByte(sv.buf, fenceSecret)
}

func mwFenceOpts() pairOpts {
	o := mwOpts()
	o.memSize = fenceSize
	return o
}

func testMWFenceRead(t *testing.T, s *suite) {
	c, sv, f := s.windowFence(t, verbs.AccessRemoteRead)
	s.fenceRead(t, c, sv, f)
}

func testMWFenceWrite(t *testing.T, s *suite) {
	c, sv, f := s.windowFence(t, verbs.AccessRemoteWrite)
	s.fenceWrite(t, c, sv, f)
}

// windowFence makes a pair whose server has a window with access over all
// its memory, and the fence that invalidates the window.
func (s *suite) windowFence(t *testing.T, access verbs.Access) (c, sv *endpoint, f fence) {
	s.needMW(t)
	c, sv = s.pair(t, mwFenceOpts())
	rkey := s.bind(t, sv, allocMW(t, sv), sv.buf, access)
	return c, sv, fence{addr: verbs.AddrOf(sv.buf), rkey: rkey, cut: func() { s.invalidateTarget(t, sv, rkey) },
		mem: "the window's memory", after: "the invalidation completed"}
}

func testMWZeroAllocDataPath(t *testing.T, s *suite) {
	s.needMW(t)
	o := mwOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	w := allocMW(t, sv)
	win := sv.buf[:8192]
	rkey := s.bind(t, sv, w, win, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	write := []verbs.SendWR{{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:4096])},
		RemoteAddr: verbs.AddrOf(win), RKey: rkey}}
	read := []verbs.SendWR{{Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[4096:8192])},
		RemoteAddr: verbs.AddrOf(win) + 4096, RKey: rkey}}
	wc := make([]verbs.WC, 8)
	round := func() {
		for _, wr := range [][]verbs.SendWR{write, read} {
			if err := c.qp.PostSend(wr); err != nil {
				panic(err)
			}
			spinOne(c.scq, wc)
		}
	}
	// Warm up past what a provider sets up once a connection has carried
	// some traffic (soft moves to shared memory after 64 KiB).
	for i := 0; i < 32; i++ {
		round()
	}
	allocs := testing.AllocsPerRun(100, round)
	require.Zero(t, allocs, "a READ and a WRITE through a window allocate nothing")
}
