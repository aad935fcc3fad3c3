package verbs

import (
	"errors"
	"fmt"
	"syscall"
)

// Error is a failed verb: the name of the call (as in libibverbs/librdmacm,
// e.g. "ibv_post_send", "rdma_connect") and the errno it produced, with an
// optional detail for people. errors.Is(err, syscall.EINVAL) and friends work.
type Error struct {
	Op     string        // the C-level name of the verb
	Errno  syscall.Errno // the errno the verb sets (0 if none applies)
	Detail string        // what was wrong, when the errno alone does not say
}

func (e *Error) Error() string {
	switch {
	case e.Detail != "" && e.Errno != 0:
		return fmt.Sprintf("%s: %s: %s", e.Op, e.Detail, e.Errno.Error())
	case e.Detail != "":
		return e.Op + ": " + e.Detail
	default:
		return e.Op + ": " + e.Errno.Error()
	}
}

// Unwrap returns the errno so that errors.Is matches syscall errors.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// Errorf builds an *Error; providers use it so that every failure names its verb.
func Errorf(op string, errno syscall.Errno, format string, args ...any) *Error {
	return &Error{Op: op, Errno: errno, Detail: fmt.Sprintf(format, args...)}
}

var (
	// ErrClosed is returned by waits on a channel that was closed, and by
	// calls on destroyed objects.
	ErrClosed = errors.New("verbs: use of closed or destroyed object")

	// ErrNoDevice means a provider has no usable device.
	ErrNoDevice = errors.New("verbs: no RDMA device found")

	// ErrCQOverrun is returned by CQ.Poll once completions were lost because
	// the CQ was full, as hardware reports IBV_EVENT_CQ_ERR. The CQ and the
	// QPs feeding it are unusable afterwards.
	ErrCQOverrun = errors.New("verbs: completion queue overrun")
)
