package streamconn

import (
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// The connection's checks of what may be queued: the credit rule's
// answer (internal/stream/credits.go) and a queue slot.

// sender is the connection's send side at work: it claims room (the
// credit rule's answer, the peer's ring, a queue slot, send buffer
// space), queues WRs and posts them (submit), and returns credit. Its
// state is sendSide (the stream's send window, the send staging and
// queue); what it checks is sendSide's (CanSendData and the others).
type sender struct{ *Conn }

func (c *Conn) send() sender { return sender{c} }

// CanSendData reports whether a data write or a control message (FIN,
// heartbeat, a rendezvous's, a ring offer) may be queued.
func (c *sendSide) CanSendData() bool { return c.TX.MayData() && c.SQ.HasRoom() }

// CanSendNotify reports whether a one-sided notification may be queued.
func (c *sendSide) CanSendNotify() bool { return c.TX.MayNotify() && c.SQ.HasRoom() }

// CanSendCredit reports whether a credit message may be queued.
func (c *sendSide) CanSendCredit() bool { return c.TX.MayCredit() && c.SQ.HasRoom() }

// reserveLocked claims room for the next RDMA write of at most want bytes:
// peer ring space, a message credit and a send queue slot, and send buffer
// space when not inline. It returns the size claimed, 0 when something is
// exhausted, and the peer address to write it at.
//
// It waits for room for a whole chunk (or all of want, if less) rather than
// posting whatever sliver completions or credits have just freed: that would
// shred a stream into tiny writes (silly window syndrome). The wait always
// ends: ring credit comes back in quarter-ring steps, and queue slots and
// send buffer room come back with the completion of a signaled WR, which
// the signaling rule (sendq.Queue.Push) puts among the WRs a writer waits
// behind, or else awaitRoomLocked's probe. A caller that gets 0 unlocks
// with unlockSubmit, so that the probe goes out, and waits (awaitRoom).
func (c sender) reserveLocked(want int) (n int, at uint64, inline bool) {
	if !c.CanSendData() {
		c.Core.Counters.CreditWaits++
		if !c.SQ.HasRoom() {
			c.awaitRoomLocked()
		}
		return 0, 0, false
	}
	n64 := min(uint64(want), uint64(c.chunk))
	free, toEnd := c.TX.Room()
	if free < n64 {
		c.Core.Counters.RingWaits++
		return 0, 0, false
	}
	n64 = min(n64, toEnd) // one write does not wrap the ring
	if int(n64) > c.inline {
		free, contig := c.SB.Room()
		if free < n64 && c.Growing().growSendLocked() { // ringgrowth.go
			free, contig = c.SB.Room()
		}
		pad := uint64(0)
		if contig < n64 {
			pad = contig // skip the buffer's tail rather than post a sliver from it
		}
		if free < pad+n64 {
			c.Core.Counters.SendBufWaits++
			c.awaitRoomLocked()
			return 0, 0, false
		}
		c.SB.Pad(pad)
	}
	n = int(n64)
	at, moved := c.TX.Reserve(n64)
	if moved {
		c.setChunkLocked() // the peer's ring grew (ringgrowth.go)
	}
	return n, at, n <= c.inline
}

// awaitRoomLocked makes sure that a writer about to wait for queue slots
// or send buffer room is woken: that a completion will come. Signaling is
// sparse (a WR in sigEvery, or a quarter of the send buffer), so the WRs
// outstanding may all be unsignaled, and then nothing would report them
// before the keepalive's probe; a signaled probe behind them does, at the
// cost of one empty frame, only when no signaled WR is outstanding.
func (c sender) awaitRoomLocked() {
	if c.SQ.WaitNeedsProbe() {
		c.postProbeLocked()
	}
}

// inlineSlotLocked is the inline staging of the next send WR, n bytes of
// it: each queue slot has its own (the send queue's first slots: those
// grow, the staging does not), so the bytes stay put until whoever posts
// the queue gets to them.
func (c sender) inlineSlotLocked(n int) []byte {
	slot := int(c.SQ.Posted % uint64(c.Slots))
	return c.ibuf[slot*c.inline : slot*c.inline+n]
}

// enqueueDataLocked queues the data write of buf (in the send buffer or an
// inline slot) to peer address at, and counts it: a message, and buf's
// bytes for the Write (or ReadFrom) whose first bytes they are when first.
func (c sender) enqueueDataLocked(buf []byte, at uint64, flags verbs.SendFlags, first bool) {
	n := uint64(len(buf))
	if flags&verbs.SendInline == 0 {
		c.SB.Post(n)
	}
	c.Core.TalkedLocked()
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, c.TX.ImmData(int(n)), buf, at, flags, false)
	c.Core.Counters.MsgsSent++
	c.Core.Counters.WroteLocked(len(buf), first)
}

// enqueueLocked queues one send WR into the peer ring (data, credit,
// control, probe), signaled when due, and counts it as posted. submit then
// hands the queue to the QP outside mu, so that a post (which on soft
// writes to a socket) never holds up completion processing or Read.
func (c sender) enqueueLocked(op verbs.Opcode, imm uint32, buf []byte, addr uint64, flags verbs.SendFlags, signal bool) {
	c.enqueueWRLocked(op, imm, c.EP.SendMR, buf, addr, c.TX.RKey, flags, signal)
}

// enqueueWRLocked queues one send WR of buf (inside mr) to addr under
// rkey: enqueueLocked's, or a one-sided operation's. It returns the WR's
// slot, where a caller puts what the WR carries beyond these (a bind, the
// operation waiting for its completion).
func (c *sendSide) enqueueWRLocked(op verbs.Opcode, imm uint32, mr verbs.MR, buf []byte, addr uint64, rkey uint32, flags verbs.SendFlags, signal bool) uint64 {
	wr := verbs.SendWR{Opcode: op, Flags: flags, Imm: imm, RemoteAddr: addr, RKey: rkey}
	if len(buf) == 0 {
		return c.SQ.Push(wr, nil, c.SB.Posted, c.SB.SignalSpan(), signal)
	}
	sge := verbs.SGE{Addr: verbs.AddrOf(buf), Length: uint32(len(buf)), LKey: mr.LKey()}
	return c.SQ.Push(wr, &sge, c.SB.Posted, c.SB.SignalSpan(), signal)
}

// submit posts the queued send WRs, in order. One goroutine at a time holds
// the role; WRs queued meanwhile by others are posted by it. It returns the
// error of a post this call made.
func (c sender) submit() error {
	c.Core.Mu.Lock()
	defer c.Core.Mu.Unlock()
	if c.SQ.Submitting {
		return nil
	}
	return c.submitLocked()
}

// submitLocked is submit with mu held and the role free: it takes the
// role, posts with mu released and returns with mu held again.
func (c sender) submitLocked() error {
	c.SQ.Submitting = true
	defer func() { c.SQ.Submitting = false }()
	for c.SQ.Submitted != c.SQ.Posted {
		if c.Core.Torn {
			return verbs.ErrClosed
		}
		batch := c.SQ.Unsubmitted()
		c.Core.Mu.Unlock()
		err := c.EP.QP.PostSend(batch)
		c.Core.Mu.Lock()
		c.SQ.Submitted += uint64(len(batch))
		if err != nil {
			c.FailLocked(err)
			return err
		}
	}
	return nil
}

// unlockSubmit submits what was queued under mu, unless a submit in
// progress will, and releases mu. It takes the role before letting go of
// mu rather than after (a Write's every message, and a Read's credit,
// come this way): one lock of mu fewer a post than an unlock and a
// submit.
func (c sender) unlockSubmit() {
	if c.SQ.Submitted != c.SQ.Posted && !c.SQ.Submitting {
		_ = c.submitLocked()
	}
	c.Core.Mu.Unlock()
}

// creditLocked returns ring and receive credit to the peer when a quarter of
// either window is owed (or when force and anything is).
func (c sender) creditLocked(force bool) {
	if c.Core.Err != nil || c.Core.Torn {
		return
	}
	recvs, units, due := c.RX.CreditDue(force)
	if !due {
		c.creditWant = false
		return
	}
	if !c.CanSendCredit() {
		c.creditWant = true // retried when completions free what is missing
		return
	}
	c.creditWant = false
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCredit(recvs, units), nil, c.TX.Addr, 0, false)
	c.TX.Spend()
	c.RX.Credit(recvs, units)
}

// sendFinLocked queues the FIN. The caller made sure a queue slot and two
// message credits are free, and submits afterwards.
func (c sender) sendFinLocked() {
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlFin), nil, c.TX.Addr, 0, true)
	c.finSent = true
	c.TX.Spend()
}

// postProbeLocked queues a signaled zero-length RDMA write: no receive is
// consumed at the peer, yet the transport must deliver it, so it detects a
// dead peer (keepalive), drains the send queue (Close) and, on a QP in
// error, completes with a flush error that wakes the poller.
func (c sender) postProbeLocked() bool {
	if c.Core.Torn || !c.SQ.ProbeRoom() {
		return false
	}
	c.enqueueLocked(verbs.OpRDMAWrite, 0, nil, c.TX.Addr, 0, true)
	return true
}
