package rdma

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
	q := newSendQueue(4, 6)
	assert.True(t, q.idle())
	assert.True(t, q.hasRoom())
	assert.True(t, q.probeRoom())

	q.posted, q.done, q.reserved = 13, 10, 1 // 3 outstanding, 1 reserved: full
	assert.Equal(t, uint64(4), q.used())
	assert.False(t, q.idle())
	assert.False(t, q.hasRoom())
	assert.True(t, q.probeRoom(), "the probe's own WR")

	q.posted++ // the probe
	assert.False(t, q.probeRoom())

	q.done, q.reserved = 14, 0
	assert.True(t, q.idle())
	assert.True(t, q.hasRoom())
}

// The connection's checks weigh the peer's message credits with the
// queue's room: a data write keeps the last credit for a credit message.
func TestSendQueueCreditChecks(t *testing.T) {
	c := &Conn{sq: newSendQueue(4, 6)}
	c.tx.Credits = 2
	assert.True(t, c.canSendData())
	assert.True(t, c.canSendCredit())

	c.sq.posted, c.sq.done = 4, 0 // full
	assert.False(t, c.canSendData())
	assert.False(t, c.canSendCredit())
	assert.False(t, c.canSendNotify())

	c.sq.done = 3
	assert.True(t, c.canSendData())
	c.tx.Credits = 1
	assert.False(t, c.canSendData(), "the last credit is kept for a credit message")
	assert.True(t, c.canSendCredit())
	c.tx.Credits = 0
	assert.False(t, c.canSendCredit())
}

// A send is signaled when asked, after sigEvery-1 unsignaled ones, and
// whenever the queue is half full, so that completions free slots before
// a writer waits for them.
func TestSendQueueSignals(t *testing.T) {
	q := newSendQueue(16, 18) // sigEvery 4
	signaled := func(signal bool) bool {
		s := q.push(verbs.SendWR{Opcode: verbs.OpRDMAWrite}, nil, 0, signal)
		return q.wrs[s].Flags&verbs.SendSignaled != 0
	}
	var got []bool
	for range 8 {
		got = append(got, signaled(false))
		q.done = q.posted // completed at once: the queue never fills
	}
	assert.Equal(t, []bool{false, false, false, true, false, false, false, true}, got,
		"one in every sigEvery")
	assert.True(t, signaled(true), "asked for")
	assert.False(t, signaled(false), "the count starts again after a signaled one")

	q.done = q.posted
	for range 6 {
		signaled(false)
		q.unsignaled = 0 // only the fill level decides below
	}
	assert.False(t, signaled(false), "7 outstanding of 16")
	assert.True(t, signaled(false), "the 8th: half the queue")
}

// Growing the send queue moves every WR not yet completed to its new slot
// with its SGE (in the new SGE array), its send buffer end and its one-sided
// operation, while earlier slots wrap; it stops at maxSlots, and the
// completions read back each WR's send buffer end.
func TestSendQueueGrowthKeepsWRs(t *testing.T) {
	const slots = 130
	q := newSendQueue(slots-2, slots)
	q.sigEvery = 1 << 20
	buf := make([]byte, 1<<16)
	ops := map[uint64]*remoteOp{}
	var end uint64
	enqueue := func() {
		seq := q.posted
		n := 1 + seq%13
		end += n
		sge := verbs.SGE{Addr: verbs.AddrOf(buf[seq%1000:]), Length: uint32(n), LKey: 7}
		s := q.push(verbs.SendWR{Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(seq), RemoteAddr: 4096 * seq}, &sge, end, false)
		if seq%5 == 0 {
			ops[seq] = &remoteOp{}
			q.ops[s] = ops[seq]
		}
	}
	check := func() {
		t.Helper()
		require.Len(t, q.sges, len(q.wrs))
		require.Len(t, q.ends, len(q.wrs))
		require.Len(t, q.ops, len(q.wrs))
		n := uint64(len(q.wrs))
		for seq := q.done; seq != q.posted; seq++ {
			i := seq % n
			wr := q.wrs[i]
			require.Equal(t, seq, wr.WRID, "slot %d", i)
			require.Equal(t, 4096*seq, wr.RemoteAddr)
			require.Len(t, wr.SG, 1)
			require.Same(t, &q.sges[i], &wr.SG[0], "WR %d's SGE is its slot's", seq)
			require.Equal(t, verbs.AddrOf(buf[seq%1000:]), wr.SG[0].Addr)
			require.Equal(t, uint32(1+seq%13), wr.SG[0].Length)
			require.Same(t, ops[seq], q.ops[i], "WR %d's one-sided operation", seq)
		}
	}
	// Wrap the starting slots, then grow while wrapped.
	for range sendStartSlots {
		enqueue()
	}
	q.done, q.submitted = 5, 6
	for range 6 {
		enqueue()
	}
	require.Equal(t, 2*sendStartSlots, len(q.wrs))
	check()
	for q.posted-q.done < slots {
		enqueue()
		check()
	}
	require.Equal(t, slots, len(q.wrs), "grown to maxSlots")

	// Completions, one signaled WR standing for those before it.
	var want uint64
	for seq := range q.posted {
		want += 1 + seq%13
		if seq < q.done || seq%3 != 0 {
			continue
		}
		got, op, ok := q.complete(seq)
		require.True(t, ok, "WR %d", seq)
		assert.Equal(t, want, got, "send buffer end of WR %d", seq)
		assert.Same(t, ops[seq], op, "WR %d's one-sided operation", seq)
		assert.Equal(t, seq+1, q.done)
	}
}

// A completion for a WR not outstanding is refused (the connection fails
// it as stray) and changes nothing.
func TestSendQueueRefusesStrayCompletions(t *testing.T) {
	q := newSendQueue(8, 10)
	for range 3 {
		q.push(verbs.SendWR{}, nil, 0, false)
	}
	_, _, ok := q.complete(3)
	assert.False(t, ok, "not posted yet")
	_, _, ok = q.complete(1)
	require.True(t, ok)
	_, _, ok = q.complete(0)
	assert.False(t, ok, "completed already")
	assert.Equal(t, uint64(2), q.done)
}

// unsubmitted hands out the queued WRs in runs that end where the slots
// wrap, each WR once and in order, a queue with every slot taken too.
func TestSendQueueSubmitsInOrderAcrossTheWrap(t *testing.T) {
	q := newSendQueue(sendStartSlots, sendStartSlots)
	var ids []uint64
	hand := func() {
		for q.submitted != q.posted {
			run := q.unsubmitted()
			require.NotEmpty(t, run)
			for _, wr := range run {
				ids = append(ids, wr.WRID)
			}
			q.submitted += uint64(len(run))
		}
	}
	for round := range 5 {
		for range 3 + round%4 {
			q.push(verbs.SendWR{}, nil, 0, false)
		}
		hand()
		q.done = q.posted
	}
	for range sendStartSlots { // every slot taken, none handed over yet
		q.push(verbs.SendWR{}, nil, 0, false)
	}
	hand()
	require.Len(t, ids, int(q.posted))
	for i, id := range ids {
		assert.Equal(t, uint64(i), id)
	}
	assert.Equal(t, sendStartSlots, len(q.wrs), "never more than the starting slots outstanding")
}

// trim gives a grown queue its starting slots back only when nothing is
// outstanding, reserved or being submitted; the keepalive's probe is due
// when the queue is idle or has an unsignaled tail, and no WR is reserved.
func TestSendQueueTrimAndProbe(t *testing.T) {
	q := newSendQueue(30, 32)
	q.sigEvery = 1 << 20
	for range 10 { // below half the queue: none signaled
		q.push(verbs.SendWR{}, nil, 0, false)
	}
	require.Greater(t, len(q.wrs), sendStartSlots)
	assert.True(t, q.probeDue(), "an unsignaled tail")
	assert.False(t, q.trim(), "WRs outstanding")

	q.done = q.posted
	q.unsignaled = 0
	q.reserved = 1
	assert.False(t, q.probeDue(), "a writer holds a reservation")
	assert.False(t, q.trim(), "a writer holds a reservation")
	q.reserved = 0
	q.submitting = true
	assert.False(t, q.trim(), "a submit reads the slots")
	q.submitting = false
	assert.True(t, q.probeDue(), "idle")
	assert.True(t, q.trim())
	assert.Equal(t, sendStartSlots, len(q.wrs))
	assert.False(t, q.trim(), "already at the start")
}
