package sendq

import "github.com/rdmanet/rdma/verbs"

// StartSlots is how many slots a queue starts with (and goes back to when
// it trims): an idle connection holds no more.
const StartSlots = 8

// Queue is a connection's send queue. Writers, the reader's credit
// updates, the FIN, one-sided operations and the keepalive's probes queue
// send WRs under the connection's mu into slots indexed by their id;
// submit hands them to the QP in order, outside mu.
//
// Its accounting, in WR ids: done <= submitted <= posted, and reserved WRs
// a writer holds while it copies outside mu. Data, credits and control
// messages may occupy depth WRs; the QP has one more, for the probe that
// must go even when they are all taken. The slots (wrs, sges, ends, ops)
// start at StartSlots and double when they fill, up to maxSlots
// (the root package's queuegrowth.go says why). Every method is called with mu held.
type Queue struct {
	Depth      uint64 // WRs data, credits and control messages may occupy
	Posted     uint64 // WRs queued (the next WR's id)
	Submitted  uint64 // WRs handed to the QP
	Done       uint64 // WRs completed
	Reserved   uint64 // WRs a writer reserved and has not queued yet
	Unsignaled uint32 // unsignaled sends since the last signaled one
	// sigEnd is the send buffer's bytes posted up to the last signaled WR,
	// its low 32 bits: what has been posted since is still in flight (no
	// completion reported it), at most the buffer (1 GiB) and a write, so
	// their difference fits. (rdma.Conn keeps to a size class:
	// TestConnFitsItsSizeClass.)
	sigEnd     uint32
	maxSlots   int32  // the most slots the queue grows to
	sigEvery   uint16 // at most this many unsignaled sends in a row (depth/4 <= 1024)
	Submitting bool   // a goroutine is handing WRs to the QP (submit)

	WRs  []verbs.SendWR
	SGEs []verbs.SGE
	Ends []uint64 // per slot: the send buffer's bytes posted up to that WR
	Ops  []*Op    // per slot: the one-sided operation waiting for that WR, if any
}

// NewQueue is a queue of depth WRs for data, credits and control
// messages, in at most maxSlots slots (at least depth+1).
func NewQueue(depth, maxSlots int) Queue {
	q := Queue{Depth: uint64(depth), sigEvery: uint16(max(depth/4, 1)), maxSlots: int32(maxSlots)}
	q.resize(min(StartSlots, maxSlots))
	return q
}

// Used is how many WRs are outstanding or reserved.
func (q *Queue) Used() uint64 { return q.Posted - q.Done + q.Reserved }

// HasRoom reports whether a data, credit or control WR may be queued.
func (q *Queue) HasRoom() bool { return q.Used() < q.Depth }

// ProbeRoom reports whether a probe may be queued: it may take the WR the
// QP keeps beyond depth.
func (q *Queue) ProbeRoom() bool { return q.Used() <= q.Depth }

// Idle reports whether every WR queued has completed.
func (q *Queue) Idle() bool { return q.Done == q.Posted }

// ProbeDue reports whether the keepalive's probe has work: no WR is
// reserved, and every one queued has completed (the probe tests the
// peer), or an unsignaled tail waits for a signaled WR behind it to
// report it.
func (q *Queue) ProbeDue() bool { return q.Reserved == 0 && (q.Idle() || q.Unsignaled > 0) }

// Push queues wr, its one SGE (if any) kept in the WR's slot, end the send
// buffer's bytes posted once it is, and returns the slot. The WR is
// signaled when signal says so, when sigEvery-1 unsignaled ones precede
// it, or when the send buffer's bytes posted since the last signaled WR
// reach sigBytes (Buffer.SignalSpan: a quarter of the buffer once half of
// it is in flight): so a writer that waits for slots or buffer room has a
// signaled WR outstanding to wake it (WaitNeedsProbe covers what these
// bounds do not). Signaling is no denser under pressure: on soft each
// signaled WR costs an ACK frame from the peer.
func (q *Queue) Push(wr verbs.SendWR, sge *verbs.SGE, end, sigBytes uint64, signal bool) uint64 {
	s := q.slot()
	if signal || q.Unsignaled+1 >= uint32(q.sigEvery) || uint64(uint32(end)-q.sigEnd) >= sigBytes {
		wr.Flags |= verbs.SendSignaled
		q.Unsignaled = 0
		q.sigEnd = uint32(end)
	} else {
		q.Unsignaled++
	}
	wr.WRID = q.Posted
	wr.SG = nil
	if sge != nil {
		q.SGEs[s] = *sge
		wr.SG = q.SGEs[s : s+1]
	}
	q.WRs[s] = wr
	q.Ends[s] = end
	q.Ops[s] = nil
	q.Posted++
	return s
}

// SignalOutstanding reports whether a signaled WR is queued and not yet
// completed: its completion will come, and report the WRs before it.
// The last signaled WR's id is Posted-Unsignaled-1 (none was, while
// Posted == Unsignaled).
func (q *Queue) SignalOutstanding() bool { return q.Posted-uint64(q.Unsignaled) > q.Done }

// WaitNeedsProbe reports whether a writer about to wait for queue slots
// or send buffer room must first queue a signaled probe: WRs are
// outstanding, but none of them is signaled, so no completion would come
// to free them (only the keepalive's probe, much later).
func (q *Queue) WaitNeedsProbe() bool { return !q.Idle() && !q.SignalOutstanding() }

// slot is the slot of the next WR, growing the queue if that slot still
// holds one not completed.
func (q *Queue) slot() uint64 {
	if q.Posted-q.Done >= uint64(len(q.WRs)) && len(q.WRs) < int(q.maxSlots) {
		q.resize(min(2*len(q.WRs), int(q.maxSlots)))
	}
	return q.Posted % uint64(len(q.WRs))
}

// resize gives the queue n slots, moving the WRs from the oldest not
// completed to the newest queued to their slots in the new arrays. A
// submit posting from the old arrays outside mu reads entries that are
// never written again.
func (q *Queue) resize(n int) {
	wrs := make([]verbs.SendWR, n)
	sges := make([]verbs.SGE, n)
	ends := make([]uint64, n)
	ops := make([]*Op, n)
	for seq := q.Done; seq != q.Posted; seq++ {
		o, s := seq%uint64(len(q.WRs)), seq%uint64(n)
		wrs[s], ends[s], ops[s] = q.WRs[o], q.Ends[o], q.Ops[o]
		if len(wrs[s].SG) > 0 {
			sges[s] = q.SGEs[o]
			wrs[s].SG = sges[s : s+1]
		}
	}
	q.WRs, q.SGEs, q.Ends, q.Ops = wrs, sges, ends, ops
}

// Trim gives a grown queue its starting slots back, when nothing is
// outstanding or reserved and no submit reads the slots; it reports
// whether it did.
func (q *Queue) Trim() bool {
	if len(q.WRs) <= StartSlots || !q.Idle() || q.Reserved > 0 || q.Submitting {
		return false
	}
	q.resize(StartSlots)
	return true
}

// Complete takes in the completion of WR seq, and with it of every WR
// before it (a QP completes its sends in order; unsignaled ones report
// through the next signaled one). It returns the send buffer's bytes
// posted up to that WR, and the one-sided operation waiting for it; ok is
// false for an id not outstanding.
func (q *Queue) Complete(seq uint64) (end uint64, op *Op, ok bool) {
	if seq < q.Done || seq >= q.Posted {
		return 0, nil, false
	}
	q.Done = seq + 1
	s := seq % uint64(len(q.WRs))
	end, op = q.Ends[s], q.Ops[s]
	q.Ops[s] = nil
	return end, op, true
}

// Unsubmitted is the next run of queued WRs not yet handed to the QP, in
// their slots' order (a run ends where the slots wrap); the caller hands
// it over, then counts it with submittedRun.
func (q *Queue) Unsubmitted() []verbs.SendWR {
	n := uint64(len(q.WRs))
	h, t := q.Submitted%n, q.Posted%n
	if t <= h {
		t = n
	}
	return q.WRs[h:t]
}
