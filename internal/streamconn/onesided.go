package streamconn

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/verbs"
)

// One-sided operations (Conn.WriteRemote and ReadRemote, and through them
// package capi's rdma_write and rdma_read) share the connection's queue
// pair with the byte stream: an RDMA WRITE or READ is one more WR in the
// send queue, signaled, with a sendq.Op in its slot that the completion
// fills in; memory is registered on the connection's protection domain. A
// write with notification is an RDMA WRITE WITH
// IMMEDIATE into the peer's exposed memory whose immediate is a stream
// control message (stream.ImmNotify): it consumes one of the peer's
// receive WRs, so it needs a message credit like a data write, and the
// peer holds that credit back until its caller takes the notification, so
// notifications queue up to the receive depth and no further.
//
// The peer's device enforces rkeys, bounds and access. An access it
// refuses fails the WR with a remote access error, and, as on any RDMA
// device, moves both queue pairs to the error state: the connection fails
// on both sides.

var errNotifyOverflow = core.ProtoError("notification beyond the receive credit")

// remote posts one one-sided WR and waits for its completion. local lies
// in hold, when not nil, which the caller acquired: if remote must return
// before the WR completed, hold stays in use until the queue pair is
// destroyed, as the device may still be moving local's bytes. ctx ends the
// wait to be posted too (context.Background: only the connection's
// deadline does).
func (c remoteOps) remote(ctx context.Context, name string, op verbs.Opcode, imm uint32, mr verbs.MR, local []byte, raddr uint64, rkey uint32, hold *Buffer) error {
	credit := op == verbs.OpRDMAWriteWithImm
	// Until the WR is posted the call may give up: nothing has moved. The
	// wait is for a send slot or, for a notification, a credit, which the
	// peer's program returns only when it takes the notification: the
	// deadline of the direction the bytes go bounds it.
	dl := &c.Core.WriteDL
	if op == verbs.OpRDMARead {
		dl = &c.Core.ReadDL
	}
	wait := dl // what the wait below wakes for
	for {
		c.Core.Mu.Lock()
		if err := c.remoteErrLocked(); err != nil {
			c.Core.Mu.Unlock()
			return c.Core.OpErr(name, err)
		}
		if dl.Passed() {
			c.Core.Mu.Unlock()
			return c.Core.OpErr(name, os.ErrDeadlineExceeded)
		}
		// A data write keeps one credit for the credit message that
		// unblocks the peer's writer; a notification, which holds its
		// credit until the peer's program takes it, also keeps one for the
		// heartbeat's ping, so that a peer that takes none for a while is
		// not found unresponsive.
		if c.SQ.HasRoom() && (!credit || c.CanSendNotify()) {
			break
		}
		c.Core.Mu.Unlock()
		if ctx.Err() != nil {
			return c.Core.OpErr(name, context.Cause(ctx)) // it would have to wait
		}
		if ctx.Done() != nil && wait == dl {
			// A deadline of its own, the earlier of ctx's and the
			// connection's, which ctx's end moves into the past.
			own := core.MakeDeadline()
			_, at := dl.State()
			if cd, ok := ctx.Deadline(); ok && (at.IsZero() || cd.Before(at)) {
				at = cd
			}
			if !at.IsZero() {
				own.Set(at)
			}
			defer own.Stop()
			stop := context.AfterFunc(ctx, func() {
				own.Set(time.Unix(1, 0))
				c.poller().LookAgain()
			})
			defer stop()
			wait = &own
			continue
		}
		c.Await(c.Core.SndReady, wait, false)
	}
	r := sendq.NewOp()
	c.SQ.Ops[c.enqueueWRLocked(op, imm, mr, local, raddr, rkey, 0, true)] = r
	if credit {
		c.TX.Spend()
	}
	c.send().unlockSubmit()
	st, err := c.awaitOp(r, func() {
		// The WR may still move local's bytes until the queue pair is
		// gone: so hold stays in use.
		if hold != nil && !c.Core.Torn && hold.acquire() == nil {
			c.regs().zeroCopyLocked().Regs.Hold(hold)
		}
	})
	if err != nil {
		return c.Core.OpErr(name, err)
	}
	return c.remoteStatus(name, st)
}

// awaitOp waits for the completion of the signaled WR r stands for (in
// the send queue's ops) and returns its status. If the queue pair fails or is closing
// first (perhaps no completion will come), it returns that error after
// running failedLocked (nil: nothing) under mu; r then stays out of the
// pool, as a late completion may still fill it in.
func (c remoteOps) awaitOp(r *sendq.Op, failedLocked func()) (verbs.WCStatus, error) {
	for {
		c.Core.Mu.Lock()
		if r.Done {
			st := r.Status
			// One poke of sndReady stands for a whole batch of
			// completions, and several operations may wait on it: pass
			// it on, so that the next waiter looks at its own.
			if c.Core.Poll.Waiters > 0 {
				core.Poke(c.Core.SndReady)
			}
			c.Core.Mu.Unlock()
			r.Recycle()
			return st, nil
		}
		if err := c.remoteErrLocked(); err != nil {
			if failedLocked != nil {
				failedLocked()
			}
			c.Core.Mu.Unlock()
			return 0, err
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.SndReady, nil, false)
	}
}

// remoteErrLocked says why no one-sided operation can go on, or nil.
func (c remoteOps) remoteErrLocked() error {
	switch {
	case c.Core.Closed || c.Core.Torn:
		return net.ErrClosed
	case c.Core.Err != nil:
		return c.Core.Err
	}
	return nil
}

// remoteStatus is the result of a one-sided WR that completed with st.
func (c remoteOps) remoteStatus(name string, st verbs.WCStatus) error {
	switch st {
	case verbs.WCSuccess:
		return nil
	case verbs.WCRemAccessErr:
		return c.Core.OpErr(name, fmt.Errorf("%w: %w", onesided.ErrRemoteAccess, core.ErrRemoteAccess))
	case verbs.WCWRFlushErr:
		c.Core.Mu.Lock()
		err := c.Core.Err
		c.Core.Mu.Unlock()
		if err == nil {
			err = core.ErrReset
		}
		return c.Core.OpErr(name, err)
	}
	return c.Core.OpErr(name, core.WCError(st))
}

var errNoMoreNotes = &core.Error{Msg: "the peer closed its sending side: no more notifications", Errno: syscall.EPIPE}
