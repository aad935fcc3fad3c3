package onesided

import (
	"errors"
	"net"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// Port is the one-sided side of a connection: memory registered on its
// protection domain, and RDMA writes and reads posted on its queue pair.
// Package rdma implements it for *rdma.Conn.
type Port interface {
	// Register registers b, which must lie in memory from
	// verbs.AllocMemory, with access on the connection's protection
	// domain. The registration ends with Deregister or when the
	// connection closes, whichever comes first.
	Register(b []byte, access verbs.Access) (verbs.MR, error)
	// Deregister ends a registration; it is a no-op when the connection
	// already ended it.
	Deregister(mr verbs.MR) error
	// Write RDMA-writes local (inside mr) to the peer's raddr under rkey
	// and returns once the peer's device has acknowledged it. With notify,
	// the write carries value (at most NotifyValueMax) as immediate data:
	// the peer's WaitNotify returns it once the bytes have landed.
	Write(mr verbs.MR, local []byte, raddr uint64, rkey uint32, notify bool, value uint32) error
	// Read RDMA-reads len(local) bytes from the peer's raddr under rkey
	// into local (inside mr, registered with local write access).
	Read(mr verbs.MR, local []byte, raddr uint64, rkey uint32) error
	// WaitNotify returns the next notification from the peer, in arrival
	// order: the writer's value and how many bytes its write carried. A
	// zero deadline waits until one comes or the connection ends.
	WaitNotify(deadline time.Time) (value uint32, n int, err error)
}

// NotifyValueMax is the largest value a notification carries.
const NotifyValueMax = 1<<29 - 1

// ErrRemoteAccess is matched by the error of a Write or Read that the
// peer's device refused: a wrong rkey, out of the registered bounds, an
// access the registration does not grant, or a registration that ended.
// As on any RDMA device, the refusal also breaks the connection.
var ErrRemoteAccess = errors.New("the peer's device refused the access (wrong rkey, out of bounds, access not granted, or no longer exposed); the connection is broken")

// PortOf returns the Port of conn, or nil when conn cannot do one-sided
// operations (it is not an rdma conn with a queue pair). Package rdma sets
// it.
var PortOf = func(conn net.Conn) Port { return nil }

// Deadline is a convenience for callers that take a timeout: d < 0 means
// none.
func Deadline(d time.Duration) time.Time {
	if d < 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}
