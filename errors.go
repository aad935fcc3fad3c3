package rdma

import (
	"net"
	"syscall"
)

// connError is why a connection failed: a message for people and the errno
// that says the same to programs (errors.Is(err, syscall.ECONNRESET) works).
type connError struct {
	msg   string
	errno syscall.Errno
}

func (e *connError) Error() string { return "rdma: " + e.msg }
func (e *connError) Unwrap() error { return e.errno }

var (
	errReset       = &connError{"connection reset by peer", syscall.ECONNRESET}
	errRetry       = &connError{"peer unreachable: transport retry count exceeded", syscall.ETIMEDOUT}
	errWriteClosed = &connError{"write after CloseWrite", syscall.EPIPE}
	errRNR         = &connError{"peer stopped posting receives: RNR retry count exceeded", syscall.ETIMEDOUT}
)

func protoError(msg string) error { return &connError{"protocol error: " + msg, syscall.EPROTO} }

// breachError is a peer's breach of the stream protocol (internal/stream's
// error, which says "protocol error: ...") as the connection's error.
func breachError(err error) error { return &connError{err.Error(), syscall.EPROTO} }

func opError(op string, src, dst net.Addr, err error) error {
	return &net.OpError{Op: op, Net: Network, Source: src, Addr: dst, Err: err}
}
