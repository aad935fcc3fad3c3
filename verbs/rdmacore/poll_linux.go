//go:build cgo && linux

package rdmacore

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// fdWaiter parks goroutines on Go's runtime poller until a file descriptor
// owned by C (a completion channel's or a CM event channel's) is readable.
// The C side keeps its descriptor; the poller watches a duplicate of it, so
// closing the waiter never closes C's descriptor, and the non-blocking flag,
// which belongs to the shared open file description, holds for both.
//
// A completion channel's waiter is on the poller only on demand: while its
// waits block their own threads (the direct wait, directwait_linux.go) the
// channel stays off the poller. On it, every completion event would also
// wake the runtime's thread blocked in epoll_wait, which finds no goroutine
// waiting and sleeps again: a second thread woken for each wake-up, which
// on a host short of CPUs (the emulated guest) took a core from the
// conversation. Measured in the Soft-RoCE guest, default Config, two
// processes, medians of 5 rounds against the revision before: 64 B round
// trips 100 against 293 us (docs/design.md).
type fdWaiter struct {
	fd       int  // our duplicate of C's descriptor (the direct wait's; f.Fd would make it blocking)
	onDemand bool // on the poller only while waited on there (leavePoller takes it off)
	name     string
	closed   atomic.Bool

	mu       sync.Mutex
	f        *os.File // the poller's registration: fd itself, or on demand a duplicate of it; nil: off the poller
	rc       syscall.RawConn
	deadline time.Time
}

// newFDWaiter is a waiter on the poller for as long as it lives.
func newFDWaiter(fd int, name string) (*fdWaiter, error) {
	w, err := dupFDWaiter(fd, name)
	if err != nil {
		return nil, err
	}
	w.f = os.NewFile(uintptr(w.fd), name)
	if w.rc, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return nil, err
	}
	return w, nil
}

// newOnDemandFDWaiter is a waiter that goes on the poller at its first wait
// there and off it at leavePoller.
func newOnDemandFDWaiter(fd int, name string) (*fdWaiter, error) {
	w, err := dupFDWaiter(fd, name)
	if err != nil {
		return nil, err
	}
	w.onDemand = true
	return w, nil
}

func dupFDWaiter(fd int, name string) (*fdWaiter, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, &verbs.Error{Op: "fcntl", Errno: err.(syscall.Errno), Detail: "set O_NONBLOCK on " + name}
	}
	dup, err := dupCloexec(fd, name)
	if err != nil {
		return nil, err
	}
	return &fdWaiter{fd: dup, name: name}, nil
}

func dupCloexec(fd int, name string) (int, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, &verbs.Error{Op: "fcntl", Errno: err.(syscall.Errno), Detail: "dup " + name}
	}
	return dup, nil
}

// wait calls try until it reports done, parking on the poller in between.
// A closed waiter is verbs.ErrClosed, a passed deadline os.ErrDeadlineExceeded.
// An on-demand waiter has one wait at a time (its owner serialises them).
func (w *fdWaiter) wait(try func(fd uintptr) bool) error {
	rc, err := w.registration()
	if err == nil {
		err = rc.Read(try)
	}
	switch {
	case err == nil:
		return nil
	case w.closed.Load() || errors.Is(err, os.ErrClosed):
		// A raw read on a closed file reports internal/poll's "use of
		// closed file", which os does not export.
		return verbs.ErrClosed
	}
	return err
}

// registration puts an on-demand waiter on the poller, with the deadline in
// force, unless it is there already.
func (w *fdWaiter) registration() (syscall.RawConn, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed.Load() {
		return nil, verbs.ErrClosed
	}
	if w.f != nil {
		return w.rc, nil
	}
	dup, err := dupCloexec(w.fd, w.name)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), w.name)
	rc, err := f.SyscallConn()
	if err == nil && !w.deadline.IsZero() {
		err = f.SetReadDeadline(w.deadline)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	w.f, w.rc = f, rc
	return rc, nil
}

// leavePoller takes an on-demand waiter off the poller; no wait may be in
// progress there.
func (w *fdWaiter) leavePoller() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.onDemand && w.f != nil {
		w.f.Close()
		w.f, w.rc = nil, nil
	}
}

// onPoller reports whether the waiter is on the poller now.
func (w *fdWaiter) onPoller() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f != nil
}

func (w *fdWaiter) setDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	if w.f == nil {
		return nil
	}
	return w.f.SetReadDeadline(t)
}

// close unblocks every wait and returns once none of them is inside try, so
// the C object behind the descriptor may be destroyed right after.
func (w *fdWaiter) close() error {
	w.closed.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if w.f != nil {
		err = w.f.Close() // closes fd too, unless on demand
		w.f, w.rc = nil, nil
	}
	if w.onDemand {
		unix.Close(w.fd)
	}
	return err
}
