package core

import (
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// Error is why a connection of either wire failed: a message for people
// and the errno that says the same to programs (errors.Is(err,
// syscall.ECONNRESET) works).
type Error struct {
	Msg   string
	Errno syscall.Errno
}

func (e *Error) Error() string { return "rdma: " + e.Msg }
func (e *Error) Unwrap() error { return e.Errno }

var (
	ErrReset       = &Error{"connection reset by peer", syscall.ECONNRESET}
	ErrRetry       = &Error{"peer unreachable: transport retry count exceeded", syscall.ETIMEDOUT}
	ErrWriteClosed = &Error{"write after CloseWrite", syscall.EPIPE}
	ErrRNR         = &Error{"peer stopped posting receives: RNR retry count exceeded", syscall.ETIMEDOUT}
	// ErrRemoteAccess: a one-sided access that the peer's device refused
	// fails the WR, and moves both queue pairs to the error state.
	ErrRemoteAccess = &Error{"the peer's device refused a one-sided access (remote access error)", syscall.EACCES}
)

// ProtoError is a breach of the wire's protocol, as the connection's
// error.
func ProtoError(msg string) error { return &Error{"protocol error: " + msg, syscall.EPROTO} }

// BreachError is a peer's breach of the stream protocol (internal/stream's
// error, which says "protocol error: ...") as the connection's error.
func BreachError(err error) error { return &Error{err.Error(), syscall.EPROTO} }

// WCError is the connection's error for a work completion that failed
// with s.
func WCError(s verbs.WCStatus) error {
	switch s {
	case verbs.WCWRFlushErr:
		return ErrReset
	case verbs.WCRetryExcErr:
		return ErrRetry
	case verbs.WCRNRRetryExcErr:
		return ErrRNR
	case verbs.WCRemAccessErr:
		return ErrRemoteAccess
	}
	return &Error{"work completion failed: " + s.String(), syscall.EIO}
}
