package soft

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// mwQP is growthQP's QP (RTS, nothing transmitted: WRs complete when the
// test says their ACK came), a region windows may bind to over its memory,
// and a window.
func mwQP(t *testing.T) (*qp, *cq, *mr, *mw) {
	q, c, _, buf := growthQP(t)
	m, err := q.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessMWBind)
	require.NoError(t, err)
	wi, err := q.pd.AllocMW()
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = wi.Dealloc()
		_ = m.Dereg()
	})
	return q, c, m.(*mr), wi.(*mw)
}

func bindOf(w *mw, m *mr, off, n int, access verbs.Access) *verbs.MWBind {
	return &verbs.MWBind{MW: w, MR: m, Addr: m.addr + uint64(off), Length: uint64(n), Access: access,
		RKey: verbs.NextRKey(w.RKey())}
}

// acked completes the WRs posted so far up to one with a local error
// (which the transmitter stops at), as the peer's ACK would.
func acked(q *qp) {
	q.mu.Lock()
	a := q.snd.sqHead
	for a != q.snd.sqTail && q.snd.slot(a).status == verbs.WCSuccess {
		a++
	}
	q.snd.sqSent = a
	q.snd.completeTo(a)
	q.mu.Unlock()
}

// A window's keys: its table slot for its life, the low byte the bind's;
// the binding is found by rkey, for its QP, and never as a local key.
func TestMWKeys(t *testing.T) {
	q, c, m, w := mwQP(t)
	p := q.pd
	k0 := w.RKey()
	p.mu.Lock()
	assert.Equal(t, slotOwned|k0>>8, p.names[p.slotIndex(k0)], "its name owns its slot")
	p.mu.Unlock()
	assert.Nil(t, p.lookup(k0), "an unbound window's rkey finds nothing")

	b := bindOf(w, m, 1024, 512, verbs.AccessRemoteRead)
	require.NoError(t, q.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: b}}))
	wcs := pollAll(t, c)
	require.Len(t, wcs, 1, "nothing ahead of the bind: it completes at once")
	assert.Equal(t, verbs.WCSuccess, wcs[0].Status)
	assert.Equal(t, verbs.WCBindMW, wcs[0].Opcode)
	k1 := w.RKey()
	assert.Equal(t, b.RKey, k1)
	assert.Equal(t, k0>>8, k1>>8)

	bnd := p.lookup(k1)
	require.NotNil(t, bnd)
	assert.Same(t, q, bnd.bound)
	assert.Equal(t, m.buf[1024:1536], bnd.buf)
	assert.Equal(t, 512, cap(bnd.buf), "the binding cannot reach past its range")
	assert.Nil(t, p.lookupLocal(k1), "a window's rkey is no lkey")
	assert.Nil(t, p.lookup(k0), "the alloc's rkey is gone")

	err := m.Dereg()
	assert.ErrorIs(t, err, syscall.EINVAL, "a region with a window bound stays")
	assert.Same(t, m, p.lookupLocal(m.key))

	// An invalidation on another QP of the PD does not reach the window.
	q2, err := newQP(p, &verbs.QPInitAttr{SendCQ: c, RecvCQ: c, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	require.NoError(t, err)
	defer q2.Destroy()
	q2.mu.Lock()
	_, st := q2.invalidate(k1)
	q2.mu.Unlock()
	assert.Equal(t, verbs.WCLocQPOpErr, st)
	assert.NotNil(t, p.lookup(k1))

	require.NoError(t, w.Dealloc())
	assert.Nil(t, p.lookup(k1))
	assert.True(t, bnd.fence.state.Load()&gateClosed != 0, "Dealloc closed the binding's fence")
	assert.Zero(t, m.nMW)
	// The next region gets a key the window never had.
	m2, err := p.RegMR(m.buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	defer m2.Dereg()
	assert.NotEqual(t, k0, m2.LKey())
	assert.NotEqual(t, k1, m2.LKey())
	assert.Nil(t, p.lookup(k1))
	assert.ErrorIs(t, w.Dealloc(), verbs.ErrClosed)
}

// Binds and invalidations complete in order behind the WRs posted before
// them, though they execute at once; flushed with them on an error; not
// executed behind a WR that fails, nor on a QP in ERR.
func TestMWCompletesInOrder(t *testing.T) {
	q, c, m, w := mwQP(t)
	p := q.pd
	send := verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{{Addr: m.addr, Length: 8, LKey: m.key}}}
	b := bindOf(w, m, 0, 4096, verbs.AccessRemoteWrite)
	require.NoError(t, q.PostSend([]verbs.SendWR{send,
		{WRID: 2, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: b}}))
	assert.NotNil(t, p.lookup(b.RKey), "the bind executed as it was posted")
	require.NoError(t, q.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: b.RKey},
		{WRID: 4, Opcode: verbs.OpLocalInv, InvalidateRKey: b.RKey + 1}}))
	assert.Nil(t, p.lookup(b.RKey), "the invalidation executed as it was posted")
	assert.Empty(t, pollAll(t, c), "nothing completes ahead of the SEND")
	acked(q)
	wcs := pollAll(t, c)
	require.Len(t, wcs, 3)
	for i, op := range []verbs.WCOpcode{verbs.WCSend, verbs.WCBindMW, verbs.WCLocalInv} {
		assert.Equal(t, uint64(1+i), wcs[i].WRID)
		assert.Equal(t, verbs.WCSuccess, wcs[i].Status)
		assert.Equal(t, op, wcs[i].Opcode)
	}
	// The invalidation of an rkey not bound waits in the send queue, to
	// fail when the transmitter reaches it.
	q.mu.Lock()
	assert.Equal(t, 1, int(q.snd.sqTail-q.snd.sqHead))
	assert.Equal(t, verbs.WCLocQPOpErr, q.snd.slot(q.snd.sqHead).status)
	q.mu.Unlock()

	// Behind a WR that fails, binds are flushed, not executed.
	b2 := bindOf(w, m, 0, 4096, verbs.AccessRemoteWrite)
	require.NoError(t, q.PostSend([]verbs.SendWR{{WRID: 5, Opcode: verbs.OpBindMW, Bind: b2}}))
	assert.Nil(t, p.lookup(b2.RKey), "a bind behind a failing WR is not executed")
	require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	wcs = pollAll(t, c)
	require.Len(t, wcs, 2)
	for i, wc := range wcs {
		assert.Equal(t, uint64(4+i), wc.WRID)
		assert.Equal(t, verbs.WCWRFlushErr, wc.Status, "moved to ERR before the transmitter reached the error")
	}
	assert.Equal(t, verbs.WCLocalInv, wcs[0].Opcode)
	assert.Equal(t, verbs.WCBindMW, wcs[1].Opcode)

	// On a QP in ERR: flushed at once, not executed.
	require.NoError(t, q.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.OpBindMW, Bind: b2}}))
	assert.Nil(t, p.lookup(b2.RKey))
	wcs = pollAll(t, c)
	require.Len(t, wcs, 1)
	assert.Equal(t, verbs.WCWRFlushErr, wcs[0].Status)
}

// A bind or invalidation waiting for its completion holds a place in the
// send queue.
func TestMWSendQueueDepth(t *testing.T) {
	q, c, m, w := mwQP(t)
	send := verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{{Addr: m.addr, Length: 8, LKey: m.key}}}
	for i := 0; i < q.cap.MaxSendWR-1; i++ {
		require.NoError(t, q.PostSend([]verbs.SendWR{send}))
	}
	require.NoError(t, q.PostSend([]verbs.SendWR{{Opcode: verbs.OpBindMW, Bind: bindOf(w, m, 0, 64, verbs.AccessRemoteRead)}}))
	err := q.PostSend([]verbs.SendWR{send})
	require.ErrorIs(t, err, syscall.ENOMEM)
	acked(q)
	assert.Empty(t, pollAll(t, c), "unsignaled")
	require.NoError(t, q.PostSend([]verbs.SendWR{send}))
}

// Post-time misuse is an error of PostSend, not a completion.
func TestMWPostErrors(t *testing.T) {
	q, _, m, w := mwQP(t)
	for _, wr := range []verbs.SendWR{
		{Opcode: verbs.OpBindMW},
		{Opcode: verbs.OpBindMW, Bind: &verbs.MWBind{MW: w}},
		{Opcode: verbs.OpBindMW, Bind: bindOf(w, m, 0, 64, verbs.AccessRemoteRead), SG: []verbs.SGE{{Addr: m.addr, Length: 8, LKey: m.key}}},
		{Opcode: verbs.OpLocalInv, SG: []verbs.SGE{{Addr: m.addr, Length: 8, LKey: m.key}}},
	} {
		err := q.PostSend([]verbs.SendWR{wr})
		assert.ErrorIs(t, err, syscall.EINVAL, "%+v", wr)
	}
}

// post posts wrs on q, which must take them.
func post(t *testing.T, q *qp, wrs ...verbs.SendWR) {
	t.Helper()
	require.NoError(t, q.PostSend(wrs))
}

// enters reports whether r enters its gate (and leaves it again).
func enters(r gateRef) bool {
	if !r.enter() {
		return false
	}
	r.exit()
	return true
}

// An access admitted under one bind of a window is refused once that bind
// is invalidated, and stays refused after the window is bound again, to
// another range, with its binding (and so its fence) reused: the fence's
// generation tells the binds apart.
func TestMWGenerationRefusesStaleRef(t *testing.T) {
	q, c, m, w := mwQP(t)
	p := q.pd
	b1 := bindOf(w, m, 0, 1024, verbs.AccessRemoteRead)
	post(t, q, verbs.SendWR{Opcode: verbs.OpBindMW, Bind: b1})
	dst, ref, ok := p.remote(q, b1.RKey, b1.Addr, 512, verbs.AccessRemoteRead)
	require.True(t, ok)
	assert.Equal(t, m.buf[:512], dst)
	require.True(t, enters(ref), "admitted under the bind it was taken under")
	binding := w.b

	post(t, q, verbs.SendWR{Opcode: verbs.OpLocalInv, InvalidateRKey: b1.RKey})
	assert.False(t, enters(ref), "the bind is invalidated")

	b2 := bindOf(w, m, 2048, 1024, verbs.AccessRemoteRead)
	post(t, q, verbs.SendWR{Opcode: verbs.OpBindMW, Bind: b2})
	assert.Same(t, binding, w.b, "the bind reused the window's binding")
	assert.False(t, enters(ref), "a reference from an earlier bind does not enter the window bound again")
	_, _, ok = p.remote(q, b1.RKey, b1.Addr, 512, verbs.AccessRemoteRead)
	assert.False(t, ok, "the earlier rkey names nothing")

	dst, ref2, ok := p.remote(q, b2.RKey, b2.Addr, 512, verbs.AccessRemoteRead)
	require.True(t, ok)
	assert.Equal(t, m.buf[2048:2560], dst)
	require.True(t, enters(ref2), "the new bind's admissions enter")
	_, _, ok = p.remote(q, b2.RKey, m.addr, 512, verbs.AccessRemoteRead)
	assert.False(t, ok, "outside the new range")
	_, _, ok = p.remote(q, b2.RKey, b2.Addr, 512, verbs.AccessRemoteWrite)
	assert.False(t, ok, "beyond the new bind's access")

	require.NoError(t, w.Dealloc())
	assert.False(t, enters(ref2), "Dealloc closed the fence")
	assert.Zero(t, w.b.fence.state.Load()&gateCount, "nothing left inside")
	pollAll(t, c)
}

// Once a binding's fence has used up its generations the window takes a
// new binding, so that no generation comes round again; the old one stays
// closed for whoever still holds it.
func TestMWGenerationsRunOut(t *testing.T) {
	q, _, m, w := mwQP(t)
	p := q.pd
	old := w.b
	old.fence.state.Store(gateClosed | gateGenMax<<gateGenShift)
	b1 := bindOf(w, m, 0, 1024, verbs.AccessRemoteRead)
	post(t, q, verbs.SendWR{Opcode: verbs.OpBindMW, Bind: b1})
	require.NotSame(t, old, w.b, "a new binding")
	assert.Equal(t, uint64(gateClosed|gateGenMax<<gateGenShift), old.fence.state.Load(), "the old binding stays closed")
	_, ref, ok := p.remote(q, b1.RKey, b1.Addr, 512, verbs.AccessRemoteRead)
	require.True(t, ok)
	require.True(t, enters(ref))
}

// A bind and an invalidation of a window allocate nothing once the queue
// pair has carried a few.
func TestMWBindInvalidateAllocs(t *testing.T) {
	q, c, m, w := mwQP(t)
	bind := []verbs.SendWR{{Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: bindOf(w, m, 0, 2048, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)}}
	inv := []verbs.SendWR{{Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled}}
	wc := make([]verbs.WC, 4)
	cycle := func() {
		b := bind[0].Bind
		b.RKey = verbs.NextRKey(w.RKey())
		if err := q.PostSend(bind); err != nil {
			panic(err)
		}
		inv[0].InvalidateRKey = b.RKey
		if err := q.PostSend(inv); err != nil {
			panic(err)
		}
		if n, err := c.Poll(wc); err != nil || n != 2 || wc[0].Status != verbs.WCSuccess || wc[1].Status != verbs.WCSuccess {
			panic(fmt.Sprintf("completions %d %v %+v", n, err, wc[:n]))
		}
	}
	for i := 0; i < 16; i++ {
		cycle()
	}
	assert.Zero(t, testing.AllocsPerRun(200, cycle), "a bind and an invalidation allocate nothing")
}
