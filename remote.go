package rdma

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

// One-sided operations on a Conn (see the package doc and docs/design.md,
// "One-sided operations"). One side exposes a range of a Buffer to the
// connection's peer (Expose) and sends it the Desc; the peer then writes
// (WriteRemote, WriteRemoteNotify) and reads (ReadRemote) that range with
// RDMA WRITE and READ on the connection's queue pair, without the exposing
// side taking part, until Unexpose, Buffer.Free or Close.
//
// What a Desc allows is decided by the exposing side's device, not by the
// Desc: the range is registered on this connection's own protection
// domain, so only this connection's peer can reach it, and the device
// checks the rkey, the bounds and the access of every request against the
// registration. A Desc is checked locally first (form, access, bounds), so
// honest mistakes fail with ErrBadDesc and break nothing; an access the
// device refuses fails with ErrRemoteAccess and, as on every RDMA device,
// breaks this connection on both sides (other connections go on).

// Desc describes a range one side of a connection exposed to the other:
// what the peer needs to write or read it. Its layout is fixed (that of
// package capi's descriptors; internal/onesided/desc.go), so it can be
// sent as bytes in any message: magic "RDmr", version, access, address,
// length, rkey and the exposing connection's number for the range.
type Desc [onesided.DescLen]byte

// Access is what an exposed range lets the peer do: AccessRead,
// AccessWrite, or both or'ed.
type Access int

const (
	AccessRead  = Access(onesided.AccessRead)
	AccessWrite = Access(onesided.AccessWrite)
)

func (a Access) String() string {
	if a <= 0 || a > AccessRead|AccessWrite {
		return fmt.Sprintf("Access(%d)", int(a))
	}
	return onesided.Access(a).String()
}

// NotifyValueMax is the largest value WriteRemoteNotify carries.
const NotifyValueMax = onesided.NotifyValueMax

var (
	// ErrBadDesc is matched by the error of a one-sided operation whose
	// Desc is malformed or does not allow it (its access, its bounds),
	// found before anything was sent: the connection is intact. Unexpose
	// returns it for a Desc that is not a live exposure of its connection.
	ErrBadDesc = onesided.ErrDesc
	// ErrRemoteAccess is matched by the error of a one-sided operation
	// that the peer's device refused: a wrong rkey, out of the registered
	// bounds, an access not granted, or a range no longer exposed. The
	// connection is then broken on both sides.
	ErrRemoteAccess = onesided.ErrRemoteAccess
)

var errNotInBuffer = &bufferError{"the slice does not lie in a Buffer (one-sided operations move registered memory: AllocBuffer)", syscall.EINVAL}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), syscall.EINVAL)
}

// WriteRemote RDMA-writes p, which lies in a Buffer, into the range d
// describes at offset off, and returns once the peer's device has the
// bytes. d must allow AccessWrite and hold len(p) bytes at off.
func (c *Conn) WriteRemote(d Desc, off int, p []byte) error {
	return c.oneSided(context.Background(), "rdma write", verbs.OpRDMAWrite, d, off, p, 0)
}

// WriteRemoteContext is WriteRemote whose wait for a send slot also ends
// when ctx is done (its error then, context.DeadlineExceeded for its
// deadline), having posted nothing. Once posted, the write runs to its
// completion, which the transport's retry timeout bounds.
func (c *Conn) WriteRemoteContext(ctx context.Context, d Desc, off int, p []byte) error {
	return c.oneSided(ctx, "rdma write", verbs.OpRDMAWrite, d, off, p, 0)
}

// WriteRemoteNotify is WriteRemote, and then the peer's WaitNotify returns
// value (at most NotifyValueMax) and len(p), once the bytes have landed. p
// may be empty: a notification alone. Each notification takes one of the
// peer's receive credits until the peer takes it, so a writer that runs
// ahead of the peer's WaitNotify waits, as a Write waits for a reader, until
// the write deadline (SetWriteDeadline), having then posted nothing.
// (WriteRemote and ReadRemote wait for a send slot the same way, under the
// write and the read deadline; once posted, an operation runs to its
// completion, which the transport's retry timeout bounds.)
func (c *Conn) WriteRemoteNotify(d Desc, off int, p []byte, value uint32) error {
	if value > NotifyValueMax {
		return c.opErr("rdma write", invalid("notification value %d exceeds %d", value, NotifyValueMax))
	}
	return c.oneSided(context.Background(), "rdma write", verbs.OpRDMAWriteWithImm, d, off, p, stream.ImmNotify(value))
}

// WriteRemoteNotifyContext is WriteRemoteNotify whose wait for the peer's
// credit (and a send slot) also ends when ctx is done (its error then,
// context.DeadlineExceeded for its deadline), having posted nothing: a
// peer that never takes its notifications holds the caller no longer.
func (c *Conn) WriteRemoteNotifyContext(ctx context.Context, d Desc, off int, p []byte, value uint32) error {
	if value > NotifyValueMax {
		return c.opErr("rdma write", invalid("notification value %d exceeds %d", value, NotifyValueMax))
	}
	return c.oneSided(ctx, "rdma write", verbs.OpRDMAWriteWithImm, d, off, p, stream.ImmNotify(value))
}

// ReadRemote RDMA-reads len(p) bytes of the range d describes, at offset
// off, into p, which lies in a Buffer. d must allow AccessRead.
func (c *Conn) ReadRemote(d Desc, off int, p []byte) error {
	return c.oneSided(context.Background(), "rdma read", verbs.OpRDMARead, d, off, p, 0)
}

// ReadRemoteContext is ReadRemote whose wait for a send slot also ends
// when ctx is done, as WriteRemoteContext's.
func (c *Conn) ReadRemoteContext(ctx context.Context, d Desc, off int, p []byte) error {
	return c.oneSided(ctx, "rdma read", verbs.OpRDMARead, d, off, p, 0)
}

// oneSided checks a one-sided operation locally and performs it; ctx bounds
// its wait to be posted, besides the connection's deadline.
func (c *Conn) oneSided(ctx context.Context, op string, opcode verbs.Opcode, d Desc, off int, p []byte, imm uint32) (err error) {
	defer c.core.Counters.RemoteDone(opcode, len(p), &err)
	pd, err := onesided.Parse(d[:])
	if err != nil {
		return c.opErr(op, err)
	}
	if off < 0 {
		return c.opErr(op, fmt.Errorf("%w: negative offset %d", ErrBadDesc, off))
	}
	want := onesided.AccessWrite
	if opcode == verbs.OpRDMARead {
		want = onesided.AccessRead
	}
	raddr, err := pd.Check(uint64(off), uint64(len(p)), want)
	if err != nil {
		return c.opErr(op, err)
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
		return c.opErr(op, errNotInBuffer)
	}
	if err := b.acquire(); err != nil {
		return c.opErr(op, err)
	}
	defer b.release()
	mr, err := c.bufferMR(b)
	if err != nil {
		return c.opErr(op, err)
	}
	return c.remote(ctx, op, opcode, imm, mr, p, raddr, pd.RKey, b)
}

// WaitNotify returns the next notification from the peer (its
// WriteRemoteNotify's value and length), in arrival order, waiting for one
// until ctx is done. It fails once the connection is closed or broken, or
// the peer closed its sending side and no notification is left.
func (c *Conn) WaitNotify(ctx context.Context) (value uint32, n int, err error) {
	value, n, err = c.waitNotify(ctx, time.Time{})
	if err != nil {
		return 0, 0, c.opErr("wait notify", err)
	}
	return value, n, nil
}

// waitNotify takes the next notification, waiting until ctx is done or
// at passes (zero: never), whichever comes first; at's passing is
// os.ErrDeadlineExceeded, ctx's end its cause (context.DeadlineExceeded
// for its deadline). Nothing is allocated unless it must wait.
func (c *Conn) waitNotify(ctx context.Context, at time.Time) (uint32, int, error) {
	var dl *core.Deadline
	timeout := os.ErrDeadlineExceeded // at's passing
	for {
		c.core.Mu.Lock()
		if n, ok := c.notes.Pop(); ok {
			// Its receive WR is credited now that it is taken: at once if
			// it was reposted, else with its repost batch.
			if c.repostHeld > 0 {
				c.repostHeld--
			} else {
				c.rx.Owed++
			}
			c.creditLocked(false)
			c.core.Counters.NotesRecv.Add(1)
			// A poke of rcvReady may stand for several notifications,
			// and other callers (a Read, another WaitNotify) may wait
			// on it: pass it on.
			if c.core.Poll.Waiters > 0 {
				core.Poke(c.core.RcvReady)
			}
			c.unlockSubmit()
			return n.Value, int(n.N), nil
		}
		err := c.remoteErrLocked()
		switch {
		case err != nil:
		case c.rx.FinRcvd:
			err = errNoMoreNotes
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		case dl != nil && dl.Passed():
			// Perhaps before ctx's own timer fired.
			err = timeout
		}
		c.core.Mu.Unlock()
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
		c.await(c.core.RcvReady, dl, false)
	}
}
