//go:build cgo && linux

package rdmacore

import (
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// The direct wait. A goroutine parked on Go's runtime poller is woken
// through the poller and the scheduler: the thread blocked in epoll_wait
// wakes, finds the goroutine runnable, and hands it to a P, one or two
// thread wake-ups more than C's blocking mode, where the thread that waits
// in the kernel on the completion channel is the one the kernel wakes. On a
// slow host (an emulated guest) that difference is most of a ping-pong's
// round trip.
//
// So a completion channel's waiter first blocks its own thread in the
// kernel (ppoll on the channel's descriptor and a wake-up eventfd), as
// rsockets do; the Go runtime lets the thread keep its P while nothing
// else wants it, and the thread runs on from the system call as soon as
// the kernel wakes it. That costs an OS thread while it lasts, so it is
// bounded twice: at most directSlots such waits at once in the process,
// and each at most directSpan, after which the waiter parks on the poller
// as before. A conversation's waits are short and find a slot; an idle
// connection's wait moves to the poller after directSpan, holding no
// thread and costing no CPU.
const directSpan = 20 * time.Millisecond

// directSlots is how many waits may block their threads at once.
var directSlots = func() int32 {
	if v, err := strconv.Atoi(os.Getenv(DirectWaitEnv)); err == nil && v >= 0 {
		return int32(min(v, 64))
	}
	return 4
}()

// DirectWaitEnv sets how many completion-channel waits may block their
// threads in the kernel at once ("0": none, every wait parks on Go's
// runtime poller; default 4).
const DirectWaitEnv = "RDMA_DIRECT_WAITS"

var directInUse atomic.Int32

// directWaiter is a completion channel's direct wait: a wake-up eventfd
// that SetDeadline and Close signal, and the deadline.
type directWaiter struct {
	fd       int // the channel's descriptor (fdWaiter's duplicate)
	wake     int // eventfd
	deadline atomic.Int64
	blocked  atomic.Bool // a waiter is between reading the deadline and leaving ppoll
	inside   atomic.Int32
	closed   atomic.Bool
	fds      [2]unix.PollFd
}

func newDirectWaiter(fd int) (*directWaiter, error) {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, &verbs.Error{Op: "eventfd", Errno: err.(syscall.Errno), Detail: "the completion channel's wake-up"}
	}
	d := &directWaiter{fd: fd, wake: wake}
	d.fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	d.fds[1] = unix.PollFd{Fd: int32(wake), Events: unix.POLLIN}
	return d, nil
}

// take claims a slot for a direct wait; false when none is free.
func takeDirectSlot() bool {
	if directInUse.Add(1) <= directSlots {
		return true
	}
	directInUse.Add(-1)
	return false
}

func giveDirectSlot() { directInUse.Add(-1) }

// wait calls try until it reports done, blocking the thread in the kernel
// in between for at most directSpan. done is false when that passed (the
// caller parks on the poller then); the error is verbs.ErrClosed once the
// channel is closed, os.ErrDeadlineExceeded once the deadline passed.
func (d *directWaiter) wait(try func(uintptr) bool) (done bool, err error) {
	d.inside.Add(1)
	defer d.inside.Add(-1)
	end := time.Now().Add(directSpan).UnixNano()
	for {
		if d.closed.Load() {
			return true, verbs.ErrClosed
		}
		// blocked first: a SetDeadline from now on signals the eventfd, so
		// the deadline read below is the one in force or ppoll wakes.
		d.blocked.Store(true)
		now := time.Now().UnixNano()
		limit := end
		if dl := d.deadline.Load(); dl != 0 {
			// A passed deadline ends the wait even with an event there,
			// as on the poller: the event stays queued for the next.
			if now >= dl {
				d.blocked.Store(false)
				return true, os.ErrDeadlineExceeded
			}
			limit = min(limit, dl)
		}
		if try(uintptr(d.fd)) {
			d.blocked.Store(false)
			return true, nil
		}
		if now >= end {
			d.blocked.Store(false)
			return false, nil
		}
		ts := unix.NsecToTimespec(limit - now)
		d.fds[0].Revents, d.fds[1].Revents = 0, 0
		_, err := unix.Ppoll(d.fds[:], &ts, nil)
		d.blocked.Store(false)
		if err != nil && err != unix.EINTR {
			return true, &verbs.Error{Op: "ppoll", Errno: err.(syscall.Errno), Detail: "ibv_comp_channel"}
		}
		if d.fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(d.wake, b[:])
		}
	}
}

// setDeadline bounds the waits from now on, and wakes one blocked now so
// that it looks at the new deadline (a deadline in the past interrupts it).
func (d *directWaiter) setDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1)
	}
	d.deadline.Store(ns)
	if d.blocked.Load() {
		d.signal()
	}
}

func (d *directWaiter) signal() {
	one := [8]byte{1}
	_, _ = unix.Write(d.wake, one[:])
}

// close ends every direct wait and returns once none is inside try.
func (d *directWaiter) close() {
	d.closed.Store(true)
	d.signal()
	for d.inside.Load() != 0 {
		time.Sleep(10 * time.Microsecond)
		d.signal()
	}
	unix.Close(d.wake)
}
