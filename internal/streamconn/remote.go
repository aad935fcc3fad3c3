package streamconn

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// One-sided operations on a Conn: the rules a Desc is checked by and what
// the device decides are the public package's (its remote.go, and
// docs/design.md, "One-sided operations").

// Desc is the public rdma.Desc's bytes (their layout:
// internal/onesided/desc.go); the face converts it.
type Desc [onesided.DescLen]byte

var errNotInBuffer = &BufferError{"the slice does not lie in a Buffer (one-sided operations move registered memory: AllocBuffer)", syscall.EINVAL}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), syscall.EINVAL)
}

// remoteOps is the connection's one-sided part: WriteRemote, ReadRemote,
// the notifications and the exposures (exposures.go), with their checks
// (onesided.go). Its state is the exposures (zeroCopy's) and the
// notifications held (recvSide's Notes); the Conn's lock, send queue and
// protection domain are shared with the stream.
type remoteOps struct{ *Conn }

// Remote is the connection's one-sided part.
func (c *Conn) Remote() remoteOps { return remoteOps{c} }

// WriteRemote RDMA-writes p, which lies in a Buffer, into the range d
// describes at offset off, and returns once the peer's device has the
// bytes. d must allow AccessWrite and hold len(p) bytes at off.
func (c remoteOps) WriteRemote(d Desc, off int, p []byte) error {
	return c.oneSided(context.Background(), "rdma write", verbs.OpRDMAWrite, d, off, p, 0)
}

// WriteRemoteContext is WriteRemote whose wait for a send slot also ends
// when ctx is done (its error then, context.DeadlineExceeded for its
// deadline), having posted nothing. Once posted, the write runs to its
// completion, which the transport's retry timeout bounds.
func (c remoteOps) WriteRemoteContext(ctx context.Context, d Desc, off int, p []byte) error {
	return c.oneSided(ctx, "rdma write", verbs.OpRDMAWrite, d, off, p, 0)
}

// WriteRemoteNotify is WriteRemote, and then the peer's WaitNotify returns
// value (at most onesided.NotifyValueMax) and len(p), once the bytes have landed. p
// may be empty: a notification alone. Each notification takes one of the
// peer's receive credits until the peer takes it, so a writer that runs
// ahead of the peer's WaitNotify waits, as a Write waits for a reader, until
// the write deadline (SetWriteDeadline), having then posted nothing.
// (WriteRemote and ReadRemote wait for a send slot the same way, under the
// write and the read deadline; once posted, an operation runs to its
// completion, which the transport's retry timeout bounds.)
func (c remoteOps) WriteRemoteNotify(d Desc, off int, p []byte, value uint32) error {
	if value > onesided.NotifyValueMax {
		return c.Core.OpErr("rdma write", invalid("notification value %d exceeds %d", value, onesided.NotifyValueMax))
	}
	return c.oneSided(context.Background(), "rdma write", verbs.OpRDMAWriteWithImm, d, off, p, stream.ImmNotify(value))
}

// WriteRemoteNotifyContext is WriteRemoteNotify whose wait for the peer's
// credit (and a send slot) also ends when ctx is done (its error then,
// context.DeadlineExceeded for its deadline), having posted nothing: a
// peer that never takes its notifications holds the caller no longer.
func (c remoteOps) WriteRemoteNotifyContext(ctx context.Context, d Desc, off int, p []byte, value uint32) error {
	if value > onesided.NotifyValueMax {
		return c.Core.OpErr("rdma write", invalid("notification value %d exceeds %d", value, onesided.NotifyValueMax))
	}
	return c.oneSided(ctx, "rdma write", verbs.OpRDMAWriteWithImm, d, off, p, stream.ImmNotify(value))
}

// ReadRemote RDMA-reads len(p) bytes of the range d describes, at offset
// off, into p, which lies in a Buffer. d must allow AccessRead.
func (c remoteOps) ReadRemote(d Desc, off int, p []byte) error {
	return c.oneSided(context.Background(), "rdma read", verbs.OpRDMARead, d, off, p, 0)
}

// ReadRemoteContext is ReadRemote whose wait for a send slot also ends
// when ctx is done, as WriteRemoteContext's.
func (c remoteOps) ReadRemoteContext(ctx context.Context, d Desc, off int, p []byte) error {
	return c.oneSided(ctx, "rdma read", verbs.OpRDMARead, d, off, p, 0)
}

// oneSided checks a one-sided operation locally and performs it; ctx bounds
// its wait to be posted, besides the connection's deadline.
func (c remoteOps) oneSided(ctx context.Context, op string, opcode verbs.Opcode, d Desc, off int, p []byte, imm uint32) (err error) {
	defer c.Core.Counters.RemoteDone(opcode, len(p), &err)
	pd, err := onesided.Parse(d[:])
	if err != nil {
		return c.Core.OpErr(op, err)
	}
	if off < 0 {
		return c.Core.OpErr(op, fmt.Errorf("%w: negative offset %d", onesided.ErrDesc, off))
	}
	want := onesided.AccessWrite
	if opcode == verbs.OpRDMARead {
		want = onesided.AccessRead
	}
	raddr, err := pd.Check(uint64(off), uint64(len(p)), want)
	if err != nil {
		return c.Core.OpErr(op, err)
	}
	if len(p) == 0 {
		if opcode == verbs.OpRDMARead {
			return nil
		}
		// A write of nothing still goes: a notification, or the check
		// that the peer's device takes the rkey.
		return c.remote(ctx, op, opcode, imm, nil, nil, raddr, pd.RKey, nil)
	}
	b := bufferOf(p)
	if b == nil {
		return c.Core.OpErr(op, errNotInBuffer)
	}
	if err := b.acquire(); err != nil {
		return c.Core.OpErr(op, err)
	}
	defer b.release()
	mr, err := c.regs().bufferMR(b)
	if err != nil {
		return c.Core.OpErr(op, err)
	}
	return c.remote(ctx, op, opcode, imm, mr, p, raddr, pd.RKey, b)
}

// WaitNotify returns the next notification from the peer (its
// WriteRemoteNotify's value and length), in arrival order, waiting for one
// until ctx is done. It fails once the connection is closed or broken, or
// the peer closed its sending side and no notification is left.
func (c remoteOps) WaitNotify(ctx context.Context) (value uint32, n int, err error) {
	value, n, err = c.waitNotify(ctx, time.Time{})
	if err != nil {
		return 0, 0, c.Core.OpErr("wait notify", err)
	}
	return value, n, nil
}

// waitNotify takes the next notification, waiting until ctx is done or
// at passes (zero: never), whichever comes first; at's passing is
// os.ErrDeadlineExceeded, ctx's end its cause (context.DeadlineExceeded
// for its deadline). Nothing is allocated unless it must wait.
func (c remoteOps) waitNotify(ctx context.Context, at time.Time) (uint32, int, error) {
	var dl *core.Deadline
	timeout := os.ErrDeadlineExceeded // at's passing
	for {
		c.Core.Mu.Lock()
		if n, ok := c.Notes.Pop(); ok {
			// Its receive WR is credited now that it is taken: at once if
			// it was reposted, else with its repost batch.
			if c.repostHeld > 0 {
				c.repostHeld--
			} else {
				c.RX.Owed++
			}
			c.send().creditLocked(false)
			c.Core.Counters.NotesRecv.Add(1)
			// A poke of rcvReady may stand for several notifications,
			// and other callers (a Read, another WaitNotify) may wait
			// on it: pass it on.
			if c.Core.Poll.Waiters > 0 {
				core.Poke(c.Core.RcvReady)
			}
			c.send().unlockSubmit()
			return n.Value, int(n.N), nil
		}
		err := c.remoteErrLocked()
		switch {
		case err != nil:
		case c.RX.FinRcvd:
			err = errNoMoreNotes
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		case dl != nil && dl.Passed():
			// Perhaps before ctx's own timer fired.
			err = timeout
		}
		c.Core.Mu.Unlock()
		if err != nil {
			return 0, 0, err
		}
		if dl == nil {
			d := core.MakeDeadline()
			dl = &d
			if cd, ok := ctx.Deadline(); ok && (at.IsZero() || cd.Before(at)) {
				at, timeout = cd, context.DeadlineExceeded
			}
			if !at.IsZero() {
				dl.Set(at)
			}
			defer dl.Stop()
			if ctx.Done() != nil {
				// Cancellation moves the deadline into the past, which
				// wakes a waiter and the poll role's holder alike.
				stop := context.AfterFunc(ctx, func() {
					dl.Set(time.Unix(1, 0))
					c.poller().LookAgain()
				})
				defer stop()
			}
			continue
		}
		c.Await(c.Core.RcvReady, dl, false)
	}
}
