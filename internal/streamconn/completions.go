package streamconn

import (
	"syscall"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// What rdma.Conn does with its completions, once the poll role
// (internal/core's Poller) has polled them: handle applies a batch (send
// completions retire send queue slots and send buffer bytes; receives are
// reposted and credited as the credit rule says), and recvLocked applies
// one message from the peer to the stream's windows.

// Handle applies a batch of completions.
func (c *Conn) Handle(wcs []verbs.WC) {
	var rcvChanged, sndChanged bool
	var perr error
	reposts, held := 0, 0
	c.Core.Mu.Lock()
	for i := range wcs {
		wc := &wcs[i]
		if wc.WRID&recvWRID != 0 {
			c.recvPosted--
			rcvChanged = true
			if wc.Status != verbs.WCSuccess {
				c.FailLocked(core.WCError(wc.Status))
				continue
			}
			reposts++
			if perr == nil && c.Core.Err == nil {
				perr = c.recv().recvLocked(wc, &sndChanged, &held)
			}
			continue
		}
		end, op, ok := c.SQ.Complete(wc.WRID)
		if !ok {
			c.FailLocked(errStraySend)
			continue
		}
		c.SB.Retire(end)
		if op != nil {
			op.Status, op.Done = wc.Status, true
		}
		sndChanged = true
		if wc.Status != verbs.WCSuccess {
			c.FailLocked(core.WCError(wc.Status))
		}
	}
	if perr != nil {
		c.FailLocked(perr)
	}
	c.retireSendLocked() // ringgrowth.go
	c.Received += uint64(reposts)
	c.repostDue += reposts
	c.repostHeld += held
	// The credit rule (internal/stream/credits.go) says when receives go
	// back and credit with them: a notification's receive is credited
	// once the program takes it (the notes held hold theirs).
	starved := c.RX.Starved(c.recvPosted, c.Notes.Len())
	if stream.RepostNow(c.repostDue, c.repostBatch, starved) && c.Core.Err == nil && !c.Core.Torn {
		if err := c.recv().postRecvs(c.repostDue); err != nil {
			c.FailLocked(err)
		} else {
			c.recvPosted += c.repostDue
			// Only a posted receive is credited to the peer (so a batch
			// waiting here is never written to), and a notification's once
			// it is taken.
			c.RX.Owed += c.repostDue - c.repostHeld
			c.repostDue, c.repostHeld = 0, 0
		}
	}
	c.send().creditLocked(starved)
	if c.rndvDoneDue {
		c.rndv().sendRndvDoneLocked() // rndv.go
	}
	if c.pongDue {
		c.send().pongLocked()
	}
	if rcvChanged {
		core.Poke(c.Core.RcvReady)
	}
	if sndChanged {
		core.Poke(c.Core.SndReady)
	}
	c.send().unlockSubmit()
	if perr != nil {
		// Tell the peer: it gets a disconnect, we keep our error.
		_ = c.EP.ID.Disconnect()
	}
}

// receiver is the connection's receive side at work: it takes in what
// the peer's messages say (recvLocked) and keeps receive WRs posted
// (postRecvs). Its state is recvSide (the stream's receive window, the
// receives posted and their reposting, the notifications held).
type receiver struct{ *Conn }

func (c *Conn) recv() receiver { return receiver{c} }

// recvLocked applies one message from the peer; the stream's rules check
// every value in it: a peer that breaks them gets its connection failed,
// nothing more.
func (c receiver) recvLocked(wc *verbs.WC, sndChanged *bool, held *int) error {
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
		return core.BreachError(stream.ErrNoImm)
	}
	kind, err := stream.Receive(&c.RX, &c.TX, wc.Imm, wc.ByteLen)
	if err != nil {
		return core.BreachError(err)
	}
	switch kind {
	case stream.KindData:
		c.Core.Counters.MsgsRecv++
		c.Core.HeardLocked()
		if len(c.Ring) < c.Cfg.RingSize {
			c.Growing().OfferRingLocked() // ringgrowth.go
		}
	case stream.KindDataMoved:
		c.Core.Counters.MsgsRecv++
		c.Core.HeardLocked()
		c.Growing().ringMovedLocked()
	case stream.KindRing:
		msg, err := stream.ParseRingMsg(c.Growing().mailbox())
		if err == nil {
			err = c.TX.Offer(msg)
		}
		if err != nil {
			return core.BreachError(err)
		}
		*sndChanged = true
	case stream.KindCredit:
		*sndChanged = true
	case stream.KindRndvDone:
		*sndChanged = true
		c.Core.HeardLocked()
	case stream.KindRndv:
		if err := c.RX.TakeRndv(c.Growing().mailbox()[stream.RndvMsgAt:]); err != nil {
			return core.BreachError(err)
		}
		c.Core.HeardLocked()
		c.Core.Counters.RndvRecv++
	case stream.KindNotify:
		if !c.Notes.Push(onesided.Note{Value: stream.NotifyValue(wc.Imm), N: wc.ByteLen}, c.recvWRs) {
			return core.BreachError(errNotifyOverflow)
		}
		*held++
	case stream.KindPing:
		c.Core.Counters.PingsRecv++
		c.pongDue = true
	case stream.KindPong:
		c.Core.Counters.PongsRecv++
	}
	return nil
}

// FailLocked records why the connection failed (the first reason wins) and
// wakes every waiter.
func (c *Conn) FailLocked(err error) {
	if c.Core.Err == nil {
		c.Core.Err = err
		c.logFailure(err) // conn.go
	}
	c.poller().WakeLocked()
}

var errStraySend = &core.Error{Msg: "completion for a send that is not outstanding", Errno: syscall.EIO}

const recvWRID = 1 << 63 // set in the WR id of every receive
