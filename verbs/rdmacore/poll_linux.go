//go:build cgo && linux

package rdmacore

import (
	"errors"
	"os"
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
type fdWaiter struct {
	f      *os.File
	fd     int // f's descriptor, for the direct wait (f.Fd would make it blocking)
	rc     syscall.RawConn
	closed atomic.Bool
}

func newFDWaiter(fd int, name string) (*fdWaiter, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, &verbs.Error{Op: "fcntl", Errno: err.(syscall.Errno), Detail: "set O_NONBLOCK on " + name}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &verbs.Error{Op: "fcntl", Errno: err.(syscall.Errno), Detail: "dup " + name}
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fdWaiter{f: f, fd: dup, rc: rc}, nil
}

// wait calls try until it reports done, parking on the poller in between.
// A closed waiter is verbs.ErrClosed, a passed deadline os.ErrDeadlineExceeded.
func (w *fdWaiter) wait(try func(fd uintptr) bool) error {
	err := w.rc.Read(try)
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

func (w *fdWaiter) setDeadline(t time.Time) error { return w.f.SetReadDeadline(t) }

// close unblocks every wait and returns once none of them is inside try, so
// the C object behind the descriptor may be destroyed right after.
func (w *fdWaiter) close() error {
	w.closed.Store(true)
	return w.f.Close()
}
