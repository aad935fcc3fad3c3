package sendq

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// The send queue's room: data and control messages need a slot within
// depth, a probe only the WR the QP keeps beyond it; a WR a writer
// reserved counts as taken.
func TestSendQueueRoom(t *testing.T) {
	q := NewQueue(4, 6)
	assert.True(t, q.Idle())
	assert.True(t, q.HasRoom())
	assert.True(t, q.ProbeRoom())

	q.Posted, q.Done, q.Reserved = 13, 10, 1 // 3 outstanding, 1 reserved: full
	assert.Equal(t, uint64(4), q.Used())
	assert.False(t, q.Idle())
	assert.False(t, q.HasRoom())
	assert.True(t, q.ProbeRoom(), "the probe's own WR")

	q.Posted++ // the probe
	assert.False(t, q.ProbeRoom())

	q.Done, q.Reserved = 14, 0
	assert.True(t, q.Idle())
	assert.True(t, q.HasRoom())
}

// noSpan: only the WR count decides which WRs are signaled.
const noSpan = NoSpan

// A send is signaled when asked, or after sigEvery-1 unsignaled ones,
// however full the queue: under pressure too, every signaled WR costs an
// ACK from a soft peer, and sigEvery (a quarter of the depth) already puts
// a signaled WR among any quarter of the queue.
func TestSendQueueSignals(t *testing.T) {
	q := NewQueue(16, 18) // sigEvery 4
	signaled := func(signal bool) bool {
		s := q.Push(verbs.SendWR{Opcode: verbs.OpRDMAWrite}, nil, 0, noSpan, signal)
		return q.WRs[s].Flags&verbs.SendSignaled != 0
	}
	var got []bool
	for range 8 {
		got = append(got, signaled(false))
		q.Done = q.Posted // completed at once: the queue never fills
	}
	assert.Equal(t, []bool{false, false, false, true, false, false, false, true}, got,
		"one in every sigEvery")
	assert.True(t, signaled(true), "asked for")
	assert.False(t, signaled(false), "the count starts again after a signaled one")
	q.Done = q.Posted
	got = got[:0]
	for range 16 { // none completes: the queue fills to its depth
		got = append(got, signaled(false))
	}
	assert.Equal(t, []bool{false, false, true, false, false, false, true, false, false, false, true, false, false, false, true, false}, got,
		"a full queue is signaled no more densely")
}

// A send is signaled once the send buffer's bytes posted since the last
// signaled WR reach the span (a quarter of the buffer), whatever the count:
// a few large writes fill the buffer long before sigEvery WRs.
func TestSendQueueSignalsBySendBufferSpan(t *testing.T) {
	q := NewQueue(128, 130) // sigEvery 32
	var end uint64
	signaled := func(n uint64) bool {
		end += n
		s := q.Push(verbs.SendWR{Opcode: verbs.OpRDMAWriteWithImm}, nil, end, 1000, false)
		return q.WRs[s].Flags&verbs.SendSignaled != 0
	}
	assert.False(t, signaled(100))
	assert.False(t, signaled(400))
	assert.False(t, signaled(499), "999 bytes posted")
	assert.True(t, signaled(1), "1000")
	assert.False(t, signaled(0), "a credit or control message posts no bytes")
	assert.True(t, signaled(1000))
	assert.True(t, signaled(5000), "a write longer than the span")
}

// A writer about to wait for room needs a probe exactly when WRs are
// outstanding and none of them is signaled: a signaled one's completion
// would wake it, and with none outstanding there is room to come back to.
func TestSendQueueWaitNeedsProbe(t *testing.T) {
	q := NewQueue(16, 18) // sigEvery 4
	assert.False(t, q.WaitNeedsProbe(), "idle")
	q.Push(verbs.SendWR{}, nil, 0, noSpan, true)
	assert.True(t, q.SignalOutstanding())
	assert.False(t, q.WaitNeedsProbe(), "a signaled WR will complete")
	q.Push(verbs.SendWR{}, nil, 0, noSpan, false)
	q.Push(verbs.SendWR{}, nil, 0, noSpan, false)
	assert.False(t, q.WaitNeedsProbe(), "the signaled WR before the unsignaled tail reports it")
	end, _, ok := q.Complete(q.Posted - 3)
	require.True(t, ok)
	assert.Zero(t, end)
	assert.False(t, q.SignalOutstanding())
	assert.True(t, q.WaitNeedsProbe(), "two unsignaled WRs left and nothing to report them")
	q.Push(verbs.SendWR{}, nil, 0, noSpan, true) // the probe
	assert.False(t, q.WaitNeedsProbe())
	_, _, ok = q.Complete(q.Posted - 1)
	require.True(t, ok)
	assert.False(t, q.WaitNeedsProbe(), "idle again")
}

// Growing the send queue moves every WR not yet completed to its new slot
// with its SGE (in the new SGE array), its send buffer end and its one-sided
// operation, while earlier slots wrap; it stops at maxSlots, and the
// completions read back each WR's send buffer end.
func TestSendQueueGrowthKeepsWRs(t *testing.T) {
	const slots = 130
	q := NewQueue(slots-2, slots)
	q.sigEvery = 1<<16 - 1
	buf := make([]byte, 1<<16)
	ops := map[uint64]*Op{}
	var end uint64
	enqueue := func() {
		seq := q.Posted
		n := 1 + seq%13
		end += n
		sge := verbs.SGE{Addr: verbs.AddrOf(buf[seq%1000:]), Length: uint32(n), LKey: 7}
		s := q.Push(verbs.SendWR{Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(seq), RemoteAddr: 4096 * seq}, &sge, end, noSpan, false)
		if seq%5 == 0 {
			ops[seq] = &Op{}
			q.Ops[s] = ops[seq]
		}
	}
	check := func() {
		t.Helper()
		require.Len(t, q.SGEs, len(q.WRs))
		require.Len(t, q.Ends, len(q.WRs))
		require.Len(t, q.Ops, len(q.WRs))
		n := uint64(len(q.WRs))
		for seq := q.Done; seq != q.Posted; seq++ {
			i := seq % n
			wr := q.WRs[i]
			require.Equal(t, seq, wr.WRID, "slot %d", i)
			require.Equal(t, 4096*seq, wr.RemoteAddr)
			require.Len(t, wr.SG, 1)
			require.Same(t, &q.SGEs[i], &wr.SG[0], "WR %d's SGE is its slot's", seq)
			require.Equal(t, verbs.AddrOf(buf[seq%1000:]), wr.SG[0].Addr)
			require.Equal(t, uint32(1+seq%13), wr.SG[0].Length)
			require.Same(t, ops[seq], q.Ops[i], "WR %d's one-sided operation", seq)
		}
	}
	// Wrap the starting slots, then grow while wrapped.
	for range StartSlots {
		enqueue()
	}
	q.Done, q.Submitted = 5, 6
	for range 6 {
		enqueue()
	}
	require.Equal(t, 2*StartSlots, len(q.WRs))
	check()
	for q.Posted-q.Done < slots {
		enqueue()
		check()
	}
	require.Equal(t, slots, len(q.WRs), "grown to maxSlots")

	// Completions, one signaled WR standing for those before it.
	var want uint64
	for seq := range q.Posted {
		want += 1 + seq%13
		if seq < q.Done || seq%3 != 0 {
			continue
		}
		got, op, ok := q.Complete(seq)
		require.True(t, ok, "WR %d", seq)
		assert.Equal(t, want, got, "send buffer end of WR %d", seq)
		assert.Same(t, ops[seq], op, "WR %d's one-sided operation", seq)
		assert.Equal(t, seq+1, q.Done)
	}
}

// A completion for a WR not outstanding is refused (the connection fails
// it as stray) and changes nothing.
func TestSendQueueRefusesStrayCompletions(t *testing.T) {
	q := NewQueue(8, 10)
	for range 3 {
		q.Push(verbs.SendWR{}, nil, 0, noSpan, false)
	}
	_, _, ok := q.Complete(3)
	assert.False(t, ok, "not posted yet")
	_, _, ok = q.Complete(1)
	require.True(t, ok)
	_, _, ok = q.Complete(0)
	assert.False(t, ok, "completed already")
	assert.Equal(t, uint64(2), q.Done)
}

// unsubmitted hands out the queued WRs in runs that end where the slots
// wrap, each WR once and in order, a queue with every slot taken too.
func TestSendQueueSubmitsInOrderAcrossTheWrap(t *testing.T) {
	q := NewQueue(StartSlots, StartSlots)
	var ids []uint64
	hand := func() {
		for q.Submitted != q.Posted {
			run := q.Unsubmitted()
			require.NotEmpty(t, run)
			for _, wr := range run {
				ids = append(ids, wr.WRID)
			}
			q.Submitted += uint64(len(run))
		}
	}
	for round := range 5 {
		for range 3 + round%4 {
			q.Push(verbs.SendWR{}, nil, 0, noSpan, false)
		}
		hand()
		q.Done = q.Posted
	}
	for range StartSlots { // every slot taken, none handed over yet
		q.Push(verbs.SendWR{}, nil, 0, noSpan, false)
	}
	hand()
	require.Len(t, ids, int(q.Posted))
	for i, id := range ids {
		assert.Equal(t, uint64(i), id)
	}
	assert.Equal(t, StartSlots, len(q.WRs), "never more than the starting slots outstanding")
}

// trim gives a grown queue its starting slots back only when nothing is
// outstanding, reserved or being submitted; the keepalive's probe is due
// when the queue is idle or has an unsignaled tail, and no WR is reserved.
func TestSendQueueTrimAndProbe(t *testing.T) {
	q := NewQueue(30, 32)
	q.sigEvery = 1<<16 - 1
	for range 10 { // below half the queue: none signaled
		q.Push(verbs.SendWR{}, nil, 0, noSpan, false)
	}
	require.Greater(t, len(q.WRs), StartSlots)
	assert.True(t, q.ProbeDue(), "an unsignaled tail")
	assert.False(t, q.Trim(), "WRs outstanding")

	q.Done = q.Posted
	q.Unsignaled = 0
	q.Reserved = 1
	assert.False(t, q.ProbeDue(), "a writer holds a reservation")
	assert.False(t, q.Trim(), "a writer holds a reservation")
	q.Reserved = 0
	q.Submitting = true
	assert.False(t, q.Trim(), "a submit reads the slots")
	q.Submitting = false
	assert.True(t, q.ProbeDue(), "idle")
	assert.True(t, q.Trim())
	assert.Equal(t, StartSlots, len(q.WRs))
	assert.False(t, q.Trim(), "already at the start")
}
