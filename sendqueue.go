package rdma

import (
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// The send queue. Writers, the reader's credit updates, the FIN and the
// keepalive's probes queue send WRs under mu into slots indexed by their
// id; submit hands them to the QP in order, outside mu.
//
// Its accounting, in WR ids: sqDone <= sqSubmitted <= sqPosted, and
// sqReserved WRs a writer holds while it copies outside mu. Data, credits
// and control messages may occupy sqDepth WRs; the QP has one more, for
// the probe that must go even when they are all taken. The checks below
// name what may be queued; every caller holds mu.

// sqUsed is how many send WRs are outstanding or reserved.
func (c *Conn) sqUsed() uint64 { return c.sqPosted - c.sqDone + c.sqReserved }

// sqHasRoom reports whether a data, credit or control WR may be queued.
func (c *Conn) sqHasRoom() bool { return c.sqUsed() < c.sqDepth }

// sqIdle reports whether every WR posted has completed.
func (c *Conn) sqIdle() bool { return c.sqDone == c.sqPosted }

// canSendData reports whether a data write may be queued: a queue slot,
// and a message credit beyond the one kept for the credit message that
// unblocks the peer's writer. Control messages (FIN, heartbeats, a
// rendezvous's) keep that credit too.
func (c *Conn) canSendData() bool { return c.tx.Credits >= 2 && c.sqHasRoom() }

// canSendNotify reports whether a one-sided notification may be queued:
// as a data write, and one credit more, kept for the heartbeat's ping. A
// notification holds its credit until the peer's program takes it
// (onesided.go), so without that one a peer that takes none for a while
// could not be pinged and would be found unresponsive.
func (c *Conn) canSendNotify() bool { return c.tx.Credits > peerKeptCredits && c.sqHasRoom() }

// canSendCredit reports whether a credit message may be queued: a queue
// slot and the last message credit.
func (c *Conn) canSendCredit() bool { return c.tx.Credits >= 1 && c.sqHasRoom() }

// canProbe reports whether a probe may be queued: it may take the WR the
// QP keeps beyond sqDepth.
func (c *Conn) canProbe() bool { return c.sqUsed() <= c.sqDepth }

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
		free, contig := c.sendRoomLocked()
		if free < n64 && c.growSendLocked() { // ringgrowth.go
			free, contig = c.sendRoomLocked()
		}
		pad := uint64(0)
		if contig < n64 {
			pad = contig // skip the buffer's tail rather than post a sliver from it
		}
		if free < pad+n64 {
			c.stats.sendBufWaits++
			return 0, 0, false
		}
		// Nothing is reserved and unposted here (the writer posts before it
		// reserves again), so the pad counts as posted at once.
		c.sbTail += pad
		c.sbPosted += pad
	}
	n = int(n64)
	at, moved := c.tx.Reserve(n64)
	if moved {
		c.setChunkLocked() // the peer's ring grew (ringgrowth.go)
	}
	return n, at, n <= c.inline
}

// sendRoomLocked is how many send buffer bytes are free, and how many of
// those follow in a row before the buffer's end.
func (c *Conn) sendRoomLocked() (free, contig uint64) {
	size := uint64(len(c.sbuf))
	return size - (c.sbTail - max(c.sbHead, c.sbBase)), size - (c.sbTail-c.sbBase)&c.sbufMask
}

// enqueueDataLocked queues the data write of buf (in the send buffer or an
// inline slot) to peer address at.
func (c *Conn) enqueueDataLocked(buf []byte, at uint64, flags verbs.SendFlags) {
	n := uint64(len(buf))
	if flags&verbs.SendInline == 0 {
		c.sbPosted += n
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
// rkey: enqueueLocked's, or a one-sided operation's.
func (c *Conn) enqueueWRLocked(op verbs.Opcode, imm uint32, mr verbs.MR, buf []byte, addr uint64, rkey uint32, flags verbs.SendFlags, signal bool) {
	seq, slot := c.sqPosted, c.sendSlotLocked()
	if signal || c.unsignaled+1 >= c.sigEvery ||
		c.sqUsed()+1 >= c.sqDepth/2 ||
		c.sbTail-c.sbHead >= uint64(len(c.sbuf))/2 {
		flags |= verbs.SendSignaled
		c.unsignaled = 0
	} else {
		c.unsignaled++
	}
	var sg []verbs.SGE
	if len(buf) > 0 {
		c.sqSGE[slot] = verbs.SGE{Addr: verbs.AddrOf(buf), Length: uint32(len(buf)), LKey: mr.LKey()}
		sg = c.sqSGE[slot : slot+1]
	}
	c.sq[slot] = verbs.SendWR{
		WRID:       seq,
		Opcode:     op,
		Flags:      flags,
		SG:         sg,
		Imm:        imm,
		RemoteAddr: addr,
		RKey:       rkey,
	}
	c.sqEnds[slot] = c.sbPosted
	c.sqOps[slot] = nil
	c.sqPosted++
}

// submit posts the queued send WRs, in order. One goroutine at a time holds
// the role; WRs queued meanwhile by others are posted by it. It returns the
// error of a post this call made.
func (c *Conn) submit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.submitting {
		return nil
	}
	c.submitting = true
	defer func() { c.submitting = false }()
	for c.sqSubmitted != c.sqPosted {
		if c.torn {
			return verbs.ErrClosed
		}
		n := uint64(len(c.sq))
		h, t := c.sqSubmitted%n, c.sqPosted%n
		if t <= h {
			t = n
		}
		batch := c.sq[h:t]
		c.mu.Unlock()
		err := c.qp.PostSend(batch)
		c.mu.Lock()
		c.sqSubmitted += t - h
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
	pending := c.sqSubmitted != c.sqPosted && !c.submitting
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
	c.tx.Credits--
	c.rx.Credit(recvs, units)
}

// sendFinLocked queues the FIN. The caller made sure a queue slot and two
// message credits are free, and submits afterwards.
func (c *Conn) sendFinLocked() {
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlFin), nil, c.tx.Addr, 0, true)
	c.finSent = true
	c.tx.Credits--
}

// postProbeLocked queues a signaled zero-length RDMA write: no receive is
// consumed at the peer, yet the transport must deliver it, so it detects a
// dead peer (keepalive), drains the send queue (Close) and, on a QP in
// error, completes with a flush error that wakes the poller.
func (c *Conn) postProbeLocked() bool {
	if c.torn || !c.canProbe() {
		return false
	}
	c.enqueueLocked(verbs.OpRDMAWrite, 0, nil, c.tx.Addr, 0, true)
	return true
}
