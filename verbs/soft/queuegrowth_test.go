package soft

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// growthQP is a QP in RTS with no transport (nothing is transmitted), its
// send and receive queues as deep as a default rdma.Conn's, and memory
// registered for SGEs.
func growthQP(t *testing.T) (*qp, *cq, verbs.MR, []byte) {
	ctx := &device{}
	p, err := ctx.AllocPD()
	require.NoError(t, err)
	cqi, err := ctx.CreateCQ(1024, nil)
	require.NoError(t, err)
	qi, err := newQP(p.(*pd), &verbs.QPInitAttr{SendCQ: cqi, RecvCQ: cqi,
		Cap: verbs.QPCap{MaxSendWR: 129, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	mem, err := verbs.AllocMemory(4096)
	require.NoError(t, err)
	m, err := p.RegMR(mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = qi.Destroy()
		_ = m.Dereg()
		_ = p.Dealloc()
		mem.Free()
	})
	qi.state = verbs.QPSRTS
	return qi, cqi.(*cq), m, mem.Bytes()
}

// pollAll takes every completion queued on c.
func pollAll(t *testing.T, c *cq) []verbs.WC {
	var all []verbs.WC
	wc := make([]verbs.WC, 64)
	for {
		n, err := c.Poll(wc)
		require.NoError(t, err)
		if n == 0 {
			return all
		}
		all = append(all, wc[:n]...)
	}
}

// An idle QP holds a few send slots, one receive run for a stream's alike
// receives, no READ response slots and a small transmit batch; the send
// queue grows as WRs pile up (across the 32-bit PSN wrap), to the QP's
// depth and no further, every WR completing in order with its id and SGE.
func TestQPSendQueueGrowsWithLoad(t *testing.T) {
	q, c, m, buf := growthQP(t)
	assert.Len(t, q.snd.sq, sqStartSlots, "an idle QP's send slots")
	assert.Nil(t, q.rcv.resp, "no READ response slots before a READ")
	assert.Len(t, q.batch.hdrs, batchStartFrames)

	// Start just before the PSN wraps, so that growth moves a wrapped ring.
	start := ^uint32(0) - 22
	q.snd.sqHead, q.snd.sqSent, q.snd.sqTail = start, start, start
	wrs := make([]verbs.SendWR, 129)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(1000 + i), Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(m, buf[i:i+1+i%7])}}
	}
	// Complete a few first: the ring's live part no longer starts at 0.
	require.NoError(t, q.PostSend(wrs[:5]))
	q.mu.Lock()
	q.snd.sqSent = q.snd.sqTail
	q.snd.completeTo(start + 5)
	q.mu.Unlock()
	require.Len(t, pollAll(t, c), 5)
	start += 5
	require.NoError(t, q.PostSend(wrs))
	assert.Equal(t, ringSize(129), len(q.snd.sq), "grown to hold the QP's depth")
	err := q.PostSend(wrs[:1])
	require.ErrorIs(t, err, errPostFull, "MaxSendWR is still the limit")
	for i := range wrs {
		s := q.snd.slot(start + uint32(i))
		require.Equal(t, wrs[i].WRID, s.wrid)
		require.Len(t, s.sg, 1)
		require.Equal(t, verbs.AddrOf(s.sg[0]), wrs[i].SG[0].Addr, "WR %d names its own bytes", i)
		require.Equal(t, int(wrs[i].SG[0].Length), len(s.sg[0]))
	}
	q.mu.Lock()
	q.snd.sqSent = q.snd.sqTail
	q.snd.completeTo(q.snd.sqTail)
	q.mu.Unlock()
	got := pollAll(t, c)
	require.Len(t, got, len(wrs))
	for i, wc := range got {
		assert.Equal(t, wrs[i].WRID, wc.WRID, "completion %d", i)
		assert.Equal(t, verbs.WCSuccess, wc.Status)
		assert.Equal(t, wrs[i].SG[0].Length, wc.ByteLen)
	}

	// Grown, a full queue's worth posts and completes without allocating.
	wc := make([]verbs.WC, len(wrs))
	allocs := testing.AllocsPerRun(50, func() {
		if err := q.PostSend(wrs); err != nil {
			panic(err)
		}
		q.mu.Lock()
		q.snd.sqSent = q.snd.sqTail
		q.snd.completeTo(q.snd.sqTail)
		q.mu.Unlock()
		if n, err := c.Poll(wc); err != nil || n != len(wrs) {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per full send queue after growth")
}

// RecvDepth alike receives (a stream's: the same id, no SGE) take one slot
// and complete one by one; receives that differ grow the ring, up to
// MaxRecvWR WRs in all, and flush in order with their ids.
func TestQPReceiveRunsAndGrowth(t *testing.T) {
	q, c, m, buf := growthQP(t)
	alike := make([]verbs.RecvWR, 100)
	for i := range alike {
		alike[i].WRID = 1 << 63
	}
	require.NoError(t, q.PostRecv(alike))
	assert.Len(t, q.rcv.rq, rqStartSlots, "alike receives share a slot")
	assert.Equal(t, uint32(1), q.rcv.rqTail-q.rcv.rqHead)

	// Consume a few as requests would.
	q.mu.Lock()
	for range 3 {
		q.rcv.popRecv()
	}
	q.mu.Unlock()

	distinct := make([]verbs.RecvWR, 28)
	for i := range distinct {
		distinct[i] = verbs.RecvWR{WRID: uint64(i), SG: []verbs.SGE{verbs.SGEOf(m, buf[64*i:64*i+8])}}
	}
	distinct[0].SG = nil // no SGE, but not alike the run before it: another id
	require.NoError(t, q.PostRecv(distinct))
	require.NoError(t, q.PostRecv(alike[:3])) // a new run after the distinct ones
	assert.Equal(t, 128, q.rcv.rqWRs)
	assert.Greater(t, len(q.rcv.rq), rqStartSlots, "distinct receives grew the ring")
	err := q.PostRecv(alike[:1])
	require.ErrorIs(t, err, errRecvFull, "MaxRecvWR is still the limit")

	q.mu.Lock()
	q.flush(0, 0, false)
	q.mu.Unlock()
	got := pollAll(t, c)
	require.Len(t, got, 128)
	for i, wc := range got {
		want := uint64(1 << 63)
		if i >= 97 && i < 97+28 {
			want = uint64(i - 97)
		}
		assert.Equal(t, want, wc.WRID, "completion %d", i)
		assert.Equal(t, verbs.WCWRFlushErr, wc.Status)
	}
	assert.Zero(t, q.rcv.rqWRs)

	// Grown, the queue takes and gives back its WRs without allocating.
	q.state = verbs.QPSRTS
	allocs := testing.AllocsPerRun(50, func() {
		if err := q.PostRecv(distinct); err != nil {
			panic(err)
		}
		if err := q.PostRecv(alike[:3]); err != nil {
			panic(err)
		}
		q.mu.Lock()
		for range len(distinct) + 3 {
			q.rcv.popRecv()
		}
		q.mu.Unlock()
	})
	assert.Zero(t, allocs, "allocations per receive after growth")
}

// READ response slots are made on the first READ request and double up to
// the responder's limit (across the wrap of their counters), the responses
// leaving in order; the transmit batch grows when batches fill.
func TestQPReadResponsesGrow(t *testing.T) {
	q, _, m, _ := growthQP(t)
	assert.Nil(t, q.rcv.resp)
	q.rcv.respHead, q.rcv.respTail = ^uint32(0)-2, ^uint32(0)-2
	var sc scratch
	read := func(i int) (bool, error) {
		h := header{typ: frameReadReq, psn: q.rcv.rcvExpected, len: uint32(8 + i), rkey: m.RKey(), raddr: m.Addr()}
		return q.rcv.onRequest(&h, &sc)
	}
	limit := q.attr.MaxDestRdAtomic
	for i := range limit {
		ok, err := read(i)
		require.NoError(t, err)
		require.True(t, ok, "READ %d executed", i)
	}
	assert.Len(t, q.rcv.resp, ringSize(limit))

	q.mu.Lock()
	var got []header
	for len(got) < limit {
		frames := len(q.batch.hdrs)
		v, _, _ := q.buildBatch()
		require.NotEmpty(t, v)
		for i := 0; i < len(v); i++ {
			var hb [hdrLen]byte
			var h header
			copy(hb[:], v[i])
			require.NoError(t, h.decode(&hb))
			got = append(got, h)
			if h.len > 0 {
				i++ // its payload
			}
		}
		if len(got) < limit {
			assert.Equal(t, 2*frames, len(q.batch.hdrs), "a full batch doubles the next")
		}
	}
	q.mu.Unlock()
	for i, h := range got {
		assert.EqualValues(t, frameReadResp, h.typ)
		assert.Equal(t, uint32(i), h.psn, "response %d in order", i)
		assert.Equal(t, uint32(8+i), h.len)
	}

	// One READ beyond the responder's limit is an invalid request.
	q.rcv.respTail += uint32(limit)
	ok, err := read(0)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, verbs.QPSErr, q.state)
}

// A QP quiet for a whole transport timeout with nothing posted gives back
// what a burst grew: send slots, READ response slots, the transmit batch;
// one with a WR posted, or that heard an ACK, keeps them.
func TestQPTrimsWhenQuiet(t *testing.T) {
	q, c, m, buf := growthQP(t)
	wrs := make([]verbs.SendWR, 100)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(m, buf[:8])}}
	}
	require.NoError(t, q.PostSend(wrs))
	var sc scratch
	ok, err := q.rcv.onRequest(&header{typ: frameReadReq, psn: q.rcv.rcvExpected, len: 8, rkey: m.RKey(), raddr: m.Addr()}, &sc)
	require.NoError(t, err)
	require.True(t, ok)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.buildBatch() // sends the READ response
	q.batch.setFrames(maxBatchFrames, q.cap.MaxSendSGE)
	require.Greater(t, len(q.snd.sq), sqStartSlots)
	require.NotNil(t, q.rcv.resp)
	watchdog := func() {
		q.snd.wdArmed, q.snd.wdLast = true, q.snd.progress
		q.mu.Unlock()
		q.snd.watchdog()
		q.mu.Lock()
	}

	// WRs posted: nothing is trimmed.
	watchdog()
	assert.Greater(t, len(q.snd.sq), sqStartSlots, "WRs posted: the send queue stays")
	q.snd.sqSent = q.snd.sqTail
	q.snd.completeTo(q.snd.sqTail)
	// Progress (an ACK) since the last tick: nothing is trimmed.
	q.snd.wdArmed, q.snd.wdLast = true, q.snd.progress-1
	q.mu.Unlock()
	q.snd.watchdog()
	q.mu.Lock()
	assert.Greater(t, len(q.snd.sq), sqStartSlots, "an ACK in the last period: the send queue stays")

	watchdog()
	assert.Len(t, q.snd.sq, sqStartSlots, "quiet: the send queue is trimmed")
	assert.Nil(t, q.rcv.resp)
	assert.Len(t, q.batch.hdrs, batchStartFrames)
	q.mu.Unlock()
	require.NoError(t, q.PostSend(wrs[:3]), "a trimmed QP posts")
	q.mu.Lock()
	q.snd.sqSent = q.snd.sqTail
	q.snd.completeTo(q.snd.sqTail)
	q.mu.Unlock()
	assert.Len(t, pollAll(t, c), 103)
	q.mu.Lock()
}

// The transport timer runs only while the QP has work, as a NIC's does: a
// QP with nothing posted sets none (thousands of idle QPs would each wake
// every timeout), a post starts it, and once the work is done it stops.
func TestQPTimerRunsOnlyWithWork(t *testing.T) {
	q, c, m, buf := growthQP(t)
	armed := func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.snd.wdArmed
	}
	q.mu.Lock()
	q.attr.Timeout = 1 // 8 us: the timer fires often while it runs
	q.setState(verbs.QPSRTS)
	q.mu.Unlock()
	assert.False(t, armed(), "nothing posted: no timer")

	wr := verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(m, buf[:8])}}
	require.NoError(t, q.PostSend([]verbs.SendWR{wr}))
	assert.True(t, armed(), "a post starts the timer")
	time.Sleep(time.Millisecond) // many periods
	assert.True(t, armed(), "a WR posted: the timer runs on")

	q.mu.Lock()
	q.snd.sqSent = q.snd.sqTail
	q.snd.completeTo(q.snd.sqTail)
	q.mu.Unlock()
	assert.Len(t, pollAll(t, c), 1)
	require.Eventually(t, func() bool { return !armed() }, 10*time.Second, time.Millisecond, "the work done: the timer stops")
	assert.False(t, q.snd.wdTimer.Stop(), "no period pending")

	require.NoError(t, q.PostSend([]verbs.SendWR{wr}))
	assert.True(t, armed(), "the next post starts it again")
}

// Every connection on the TCP path carries a tcpTransport, buffers for a
// sleeping reader and for small writes included: it stays within the
// runtime's 1408-byte size class.
func TestTCPTransportFitsItsSizeClass(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(tcpTransport{}), uintptr(1408))
}
