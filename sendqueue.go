package rdma

import (
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// The connection's checks of what may be queued: the credit rule's
// answer (internal/stream/credits.go) and a queue slot.

// canSendData reports whether a data write or a control message (FIN,
// heartbeat, a rendezvous's, a ring offer) may be queued.
func (c *Conn) canSendData() bool { return c.tx.MayData() && c.sq.HasRoom() }

// canSendNotify reports whether a one-sided notification may be queued.
func (c *Conn) canSendNotify() bool { return c.tx.MayNotify() && c.sq.HasRoom() }

// canSendCredit reports whether a credit message may be queued.
func (c *Conn) canSendCredit() bool { return c.tx.MayCredit() && c.sq.HasRoom() }

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
		c.core.Counters.CreditWaits++
		return 0, 0, false
	}
	n64 := min(uint64(want), uint64(c.chunk))
	free, toEnd := c.tx.Room()
	if free < n64 {
		c.core.Counters.RingWaits++
		return 0, 0, false
	}
	n64 = min(n64, toEnd) // one write does not wrap the ring
	if int(n64) > c.inline {
		free, contig := c.sb.Room()
		if free < n64 && c.growSendLocked() { // ringgrowth.go
			free, contig = c.sb.Room()
		}
		pad := uint64(0)
		if contig < n64 {
			pad = contig // skip the buffer's tail rather than post a sliver from it
		}
		if free < pad+n64 {
			c.core.Counters.SendBufWaits++
			return 0, 0, false
		}
		c.sb.Pad(pad)
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
	slot := int(c.sq.Posted % uint64(c.slots))
	return c.ibuf[slot*c.inline : slot*c.inline+n]
}

// enqueueDataLocked queues the data write of buf (in the send buffer or an
// inline slot) to peer address at, and counts it: a message, and buf's
// bytes for the Write (or ReadFrom) whose first bytes they are when first.
func (c *Conn) enqueueDataLocked(buf []byte, at uint64, flags verbs.SendFlags, first bool) {
	n := uint64(len(buf))
	if flags&verbs.SendInline == 0 {
		c.sb.Post(n)
	}
	c.core.TalkedLocked()
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, c.tx.ImmData(int(n)), buf, at, flags, false)
	c.core.Counters.MsgsSent++
	c.core.Counters.WroteLocked(len(buf), first)
}

// enqueueLocked queues one send WR into the peer ring (data, credit,
// control, probe), signaled when due, and counts it as posted. submit then
// hands the queue to the QP outside mu, so that a post (which on soft
// writes to a socket) never holds up completion processing or Read.
func (c *Conn) enqueueLocked(op verbs.Opcode, imm uint32, buf []byte, addr uint64, flags verbs.SendFlags, signal bool) {
	c.enqueueWRLocked(op, imm, c.ep.SendMR, buf, addr, c.tx.RKey, flags, signal)
}

// enqueueWRLocked queues one send WR of buf (inside mr) to addr under
// rkey: enqueueLocked's, or a one-sided operation's. It returns the WR's
// slot, where a caller puts what the WR carries beyond these (a bind, the
// operation waiting for its completion).
func (c *Conn) enqueueWRLocked(op verbs.Opcode, imm uint32, mr verbs.MR, buf []byte, addr uint64, rkey uint32, flags verbs.SendFlags, signal bool) uint64 {
	signal = signal || c.sb.HalfFull()
	wr := verbs.SendWR{Opcode: op, Flags: flags, Imm: imm, RemoteAddr: addr, RKey: rkey}
	if len(buf) == 0 {
		return c.sq.Push(wr, nil, c.sb.Posted, signal)
	}
	sge := verbs.SGE{Addr: verbs.AddrOf(buf), Length: uint32(len(buf)), LKey: mr.LKey()}
	return c.sq.Push(wr, &sge, c.sb.Posted, signal)
}

// submit posts the queued send WRs, in order. One goroutine at a time holds
// the role; WRs queued meanwhile by others are posted by it. It returns the
// error of a post this call made.
func (c *Conn) submit() error {
	c.core.Mu.Lock()
	defer c.core.Mu.Unlock()
	if c.sq.Submitting {
		return nil
	}
	c.sq.Submitting = true
	defer func() { c.sq.Submitting = false }()
	for c.sq.Submitted != c.sq.Posted {
		if c.core.Torn {
			return verbs.ErrClosed
		}
		batch := c.sq.Unsubmitted()
		c.core.Mu.Unlock()
		err := c.ep.QP.PostSend(batch)
		c.core.Mu.Lock()
		c.sq.Submitted += uint64(len(batch))
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
	pending := c.sq.Submitted != c.sq.Posted && !c.sq.Submitting
	c.core.Mu.Unlock()
	if pending {
		c.submit()
	}
}

// creditLocked returns ring and receive credit to the peer when a quarter of
// either window is owed (or when force and anything is).
func (c *Conn) creditLocked(force bool) {
	if c.core.Err != nil || c.core.Torn {
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
	if c.core.Torn || !c.sq.ProbeRoom() {
		return false
	}
	c.enqueueLocked(verbs.OpRDMAWrite, 0, nil, c.tx.Addr, 0, true)
	return true
}
