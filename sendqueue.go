package rdma

import (
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// sendQueue is a connection's send queue. Writers, the reader's credit
// updates, the FIN, one-sided operations and the keepalive's probes queue
// send WRs under the connection's mu into slots indexed by their id;
// submit hands them to the QP in order, outside mu.
//
// Its accounting, in WR ids: done <= submitted <= posted, and reserved WRs
// a writer holds while it copies outside mu. Data, credits and control
// messages may occupy depth WRs; the QP has one more, for the probe that
// must go even when they are all taken. The slots (wrs, sges, ends, ops)
// start at sendStartSlots and double when they fill, up to maxSlots
// (queuegrowth.go says why). Every method is called with mu held.
type sendQueue struct {
	depth      uint64 // WRs data, credits and control messages may occupy
	posted     uint64 // WRs queued (the next WR's id)
	submitted  uint64 // WRs handed to the QP
	done       uint64 // WRs completed
	reserved   uint64 // WRs a writer reserved and has not queued yet
	unsignaled uint32 // unsignaled sends since the last signaled one
	sigEvery   uint32 // at most this many unsignaled sends in a row
	maxSlots   int32  // the most slots the queue grows to
	submitting bool   // a goroutine is handing WRs to the QP (submit)

	wrs  []verbs.SendWR
	sges []verbs.SGE
	ends []uint64    // per slot: the send buffer's bytes posted up to that WR
	ops  []*remoteOp // per slot: the one-sided operation waiting for that WR, if any
}

// newSendQueue is a queue of depth WRs for data, credits and control
// messages, in at most maxSlots slots (at least depth+1).
func newSendQueue(depth, maxSlots int) sendQueue {
	q := sendQueue{depth: uint64(depth), sigEvery: uint32(max(depth/4, 1)), maxSlots: int32(maxSlots)}
	q.resize(min(sendStartSlots, maxSlots))
	return q
}

// used is how many WRs are outstanding or reserved.
func (q *sendQueue) used() uint64 { return q.posted - q.done + q.reserved }

// hasRoom reports whether a data, credit or control WR may be queued.
func (q *sendQueue) hasRoom() bool { return q.used() < q.depth }

// probeRoom reports whether a probe may be queued: it may take the WR the
// QP keeps beyond depth.
func (q *sendQueue) probeRoom() bool { return q.used() <= q.depth }

// idle reports whether every WR queued has completed.
func (q *sendQueue) idle() bool { return q.done == q.posted }

// probeDue reports whether the keepalive's probe has work: no WR is
// reserved, and every one queued has completed (the probe tests the
// peer), or an unsignaled tail waits for a signaled WR behind it to
// report it.
func (q *sendQueue) probeDue() bool { return q.reserved == 0 && (q.idle() || q.unsignaled > 0) }

// push queues wr, its one SGE (if any) kept in the WR's slot, end the send
// buffer's bytes posted once it is, and returns the slot. The WR is
// signaled when signal says so, when sigEvery unsignaled ones preceded
// it, or when the queue is half full: completions must come often enough
// to free slots and send buffer before a writer waits for them.
func (q *sendQueue) push(wr verbs.SendWR, sge *verbs.SGE, end uint64, signal bool) uint64 {
	s := q.slot()
	if signal || q.unsignaled+1 >= q.sigEvery || q.used()+1 >= q.depth/2 {
		wr.Flags |= verbs.SendSignaled
		q.unsignaled = 0
	} else {
		q.unsignaled++
	}
	wr.WRID = q.posted
	wr.SG = nil
	if sge != nil {
		q.sges[s] = *sge
		wr.SG = q.sges[s : s+1]
	}
	q.wrs[s] = wr
	q.ends[s] = end
	q.ops[s] = nil
	q.posted++
	return s
}

// slot is the slot of the next WR, growing the queue if that slot still
// holds one not completed.
func (q *sendQueue) slot() uint64 {
	if q.posted-q.done >= uint64(len(q.wrs)) && len(q.wrs) < int(q.maxSlots) {
		q.resize(min(2*len(q.wrs), int(q.maxSlots)))
	}
	return q.posted % uint64(len(q.wrs))
}

// resize gives the queue n slots, moving the WRs from the oldest not
// completed to the newest queued to their slots in the new arrays. A
// submit posting from the old arrays outside mu reads entries that are
// never written again.
func (q *sendQueue) resize(n int) {
	wrs := make([]verbs.SendWR, n)
	sges := make([]verbs.SGE, n)
	ends := make([]uint64, n)
	ops := make([]*remoteOp, n)
	for seq := q.done; seq != q.posted; seq++ {
		o, s := seq%uint64(len(q.wrs)), seq%uint64(n)
		wrs[s], ends[s], ops[s] = q.wrs[o], q.ends[o], q.ops[o]
		if len(wrs[s].SG) > 0 {
			sges[s] = q.sges[o]
			wrs[s].SG = sges[s : s+1]
		}
	}
	q.wrs, q.sges, q.ends, q.ops = wrs, sges, ends, ops
}

// trim gives a grown queue its starting slots back, when nothing is
// outstanding or reserved and no submit reads the slots; it reports
// whether it did.
func (q *sendQueue) trim() bool {
	if len(q.wrs) <= sendStartSlots || !q.idle() || q.reserved > 0 || q.submitting {
		return false
	}
	q.resize(sendStartSlots)
	return true
}

// complete takes in the completion of WR seq, and with it of every WR
// before it (a QP completes its sends in order; unsignaled ones report
// through the next signaled one). It returns the send buffer's bytes
// posted up to that WR, and the one-sided operation waiting for it; ok is
// false for an id not outstanding.
func (q *sendQueue) complete(seq uint64) (end uint64, op *remoteOp, ok bool) {
	if seq < q.done || seq >= q.posted {
		return 0, nil, false
	}
	q.done = seq + 1
	s := seq % uint64(len(q.wrs))
	end, op = q.ends[s], q.ops[s]
	q.ops[s] = nil
	return end, op, true
}

// unsubmitted is the next run of queued WRs not yet handed to the QP, in
// their slots' order (a run ends where the slots wrap); the caller hands
// it over, then counts it with submittedRun.
func (q *sendQueue) unsubmitted() []verbs.SendWR {
	n := uint64(len(q.wrs))
	h, t := q.submitted%n, q.posted%n
	if t <= h {
		t = n
	}
	return q.wrs[h:t]
}

// The connection's checks of what may be queued: the credit rule's
// answer (internal/stream/credits.go) and a queue slot.

// canSendData reports whether a data write or a control message (FIN,
// heartbeat, a rendezvous's, a ring offer) may be queued.
func (c *Conn) canSendData() bool { return c.tx.MayData() && c.sq.hasRoom() }

// canSendNotify reports whether a one-sided notification may be queued.
func (c *Conn) canSendNotify() bool { return c.tx.MayNotify() && c.sq.hasRoom() }

// canSendCredit reports whether a credit message may be queued.
func (c *Conn) canSendCredit() bool { return c.tx.MayCredit() && c.sq.hasRoom() }

// reserveLocked claims room for the next RDMA write of at most want bytes:
// peer ring space, a message credit and a send queue slot, and send buffer
// space when not inline. It returns the size claimed, 0 when something is
// exhausted, and the peer address to write it at.
//
// It waits for room for a whole chunk (or all of want, if less) rather than
// posting whatever sliver completions or credits have just freed: that would
// shred a stream into tiny writes (silly window syndrome). The wait always
// ends: ring credit comes back in quarter-ring steps, and when the send
// buffer is more than half full every send is signaled.
func (c *Conn) reserveLocked(want int) (n int, at uint64, inline bool) {
	if !c.canSendData() {
		c.stats.creditWaits++
		return 0, 0, false
	}
	n64 := min(uint64(want), uint64(c.chunk))
	free, toEnd := c.tx.Room()
	if free < n64 {
		c.stats.ringWaits++
		return 0, 0, false
	}
	n64 = min(n64, toEnd) // one write does not wrap the ring
	if int(n64) > c.inline {
		free, contig := c.sb.room()
		if free < n64 && c.growSendLocked() { // ringgrowth.go
			free, contig = c.sb.room()
		}
		pad := uint64(0)
		if contig < n64 {
			pad = contig // skip the buffer's tail rather than post a sliver from it
		}
		if free < pad+n64 {
			c.stats.sendBufWaits++
			return 0, 0, false
		}
		c.sb.pad(pad)
	}
	n = int(n64)
	at, moved := c.tx.Reserve(n64)
	if moved {
		c.setChunkLocked() // the peer's ring grew (ringgrowth.go)
	}
	return n, at, n <= c.inline
}

// inlineSlotLocked is the inline staging of the next send WR, n bytes of
// it: each queue slot has its own (the send queue's first slots: those
// grow, the staging does not), so the bytes stay put until whoever posts
// the queue gets to them.
func (c *Conn) inlineSlotLocked(n int) []byte {
	slot := int(c.sq.posted % uint64(c.slots))
	return c.ibuf[slot*c.inline : slot*c.inline+n]
}

// enqueueDataLocked queues the data write of buf (in the send buffer or an
// inline slot) to peer address at.
func (c *Conn) enqueueDataLocked(buf []byte, at uint64, flags verbs.SendFlags) {
	n := uint64(len(buf))
	if flags&verbs.SendInline == 0 {
		c.sb.post(n)
	}
	c.stats.msgsSent++
	c.talkedLocked()
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, c.tx.ImmData(int(n)), buf, at, flags, false)
}

// enqueueLocked queues one send WR into the peer ring (data, credit,
// control, probe), signaled when due, and counts it as posted. submit then
// hands the queue to the QP outside mu, so that a post (which on soft
// writes to a socket) never holds up completion processing or Read.
func (c *Conn) enqueueLocked(op verbs.Opcode, imm uint32, buf []byte, addr uint64, flags verbs.SendFlags, signal bool) {
	c.enqueueWRLocked(op, imm, c.sendMR, buf, addr, c.tx.RKey, flags, signal)
}

// enqueueWRLocked queues one send WR of buf (inside mr) to addr under
// rkey: enqueueLocked's, or a one-sided operation's. It returns the WR's
// slot, where a caller puts what the WR carries beyond these (a bind, the
// operation waiting for its completion).
func (c *Conn) enqueueWRLocked(op verbs.Opcode, imm uint32, mr verbs.MR, buf []byte, addr uint64, rkey uint32, flags verbs.SendFlags, signal bool) uint64 {
	signal = signal || c.sb.halfFull()
	wr := verbs.SendWR{Opcode: op, Flags: flags, Imm: imm, RemoteAddr: addr, RKey: rkey}
	if len(buf) == 0 {
		return c.sq.push(wr, nil, c.sb.posted, signal)
	}
	sge := verbs.SGE{Addr: verbs.AddrOf(buf), Length: uint32(len(buf)), LKey: mr.LKey()}
	return c.sq.push(wr, &sge, c.sb.posted, signal)
}

// submit posts the queued send WRs, in order. One goroutine at a time holds
// the role; WRs queued meanwhile by others are posted by it. It returns the
// error of a post this call made.
func (c *Conn) submit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sq.submitting {
		return nil
	}
	c.sq.submitting = true
	defer func() { c.sq.submitting = false }()
	for c.sq.submitted != c.sq.posted {
		if c.torn {
			return verbs.ErrClosed
		}
		batch := c.sq.unsubmitted()
		c.mu.Unlock()
		err := c.qp.PostSend(batch)
		c.mu.Lock()
		c.sq.submitted += uint64(len(batch))
		if err != nil {
			c.failLocked(err)
			return err
		}
	}
	return nil
}

// unlockSubmit releases mu and submits what was queued under it, unless a
// submit in progress will.
func (c *Conn) unlockSubmit() {
	pending := c.sq.submitted != c.sq.posted && !c.sq.submitting
	c.mu.Unlock()
	if pending {
		c.submit()
	}
}

// creditLocked returns ring and receive credit to the peer when a quarter of
// either window is owed (or when force and anything is).
func (c *Conn) creditLocked(force bool) {
	if c.err != nil || c.torn {
		return
	}
	recvs, units, due := c.rx.CreditDue(force)
	if !due {
		c.creditWant = false
		return
	}
	if !c.canSendCredit() {
		c.creditWant = true // retried when completions free what is missing
		return
	}
	c.creditWant = false
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCredit(recvs, units), nil, c.tx.Addr, 0, false)
	c.tx.Spend()
	c.rx.Credit(recvs, units)
}

// sendFinLocked queues the FIN. The caller made sure a queue slot and two
// message credits are free, and submits afterwards.
func (c *Conn) sendFinLocked() {
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlFin), nil, c.tx.Addr, 0, true)
	c.finSent = true
	c.tx.Spend()
}

// postProbeLocked queues a signaled zero-length RDMA write: no receive is
// consumed at the peer, yet the transport must deliver it, so it detects a
// dead peer (keepalive), drains the send queue (Close) and, on a QP in
// error, completes with a flush error that wakes the poller.
func (c *Conn) postProbeLocked() bool {
	if c.torn || !c.sq.probeRoom() {
		return false
	}
	c.enqueueLocked(verbs.OpRDMAWrite, 0, nil, c.tx.Addr, 0, true)
	return true
}
