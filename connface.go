package rdma

import (
	"net"
	"time"

	"github.com/rdmanet/rdma/internal/core"
)

// connFace is what a connection of either wire (Conn, RsocketConn) shows
// as a net.Conn over the state both wires share (core, internal/core's
// Conn: the locks, Close's flag and steps, the failure, the deadlines,
// the wake-ups of waiting Reads and Writes, the poll role's state, the
// watch, the *net.OpErrors): the provider and fallback.
// core.Mu is the connection's lock: each wire's own state is guarded by
// it too.
type connFace struct {
	provider string
	fallback error // why an auto dial fell back to soft (mixed.go)

	// The state the wires share (internal/core): locks, Close, the
	// failure, deadlines, wake-ups, the poll role and the counters.
	core core.Conn
}

// init readies the face of a connection carried by provider and polled by
// r.
func (f *connFace) init(provider string, r core.Poller) {
	f.provider = provider
	f.core.Init(r)
}

// established takes in the addresses of the connection on id, once it is
// established.
func (f *connFace) established(laddr, raddr *net.TCPAddr) {
	f.core.Local, f.core.Remote = fromTCPAddr(laddr).netAddr(), fromTCPAddr(raddr).netAddr()
	f.core.Counters.Opened = time.Now()
}

// closeConn is Close for either wire (core's Poller.Close, over the
// wire's steps w), and then the connection leaves the registry.
func closeConn(c statser, r core.Poller, w core.ClosingWire) error {
	return closed(c, r.Close(w))
}

// closed is what follows a wire's Close (its error err): a connection that
// closed leaves the registry.
func closed(c statser, err error) error {
	if err != nil {
		return err
	}
	unregister(c) // registry.go
	return nil
}

// asAddr is a connection's address as its face shows it (nil until
// established).
func asAddr(a net.Addr) *Addr { r, _ := a.(*Addr); return r }

// LocalAddr returns the local address.
func (f *connFace) LocalAddr() net.Addr { return f.localAddr() }

// RemoteAddr returns the peer's address.
func (f *connFace) RemoteAddr() net.Addr { return f.remoteAddr() }

// localAddr and remoteAddr are the connection's addresses, which core
// holds for its *net.OpErrors: nil until the connection is established.
func (f *connFace) localAddr() *Addr  { return asAddr(f.core.Local) }
func (f *connFace) remoteAddr() *Addr { return asAddr(f.core.Remote) }

// Provider names the verbs provider that carries the connection: "soft" or
// "rdmacore".
func (f *connFace) Provider() string { return f.provider }

// Fallback returns a *FallbackError when the connection was dialed with
// provider auto on a host with an RDMA device and is carried by soft because
// the peer did not answer over the RDMA connection manager; else nil.
func (f *connFace) Fallback() error { return f.fallback }

// SetDeadline sets the read and write deadlines.
func (f *connFace) SetDeadline(t time.Time) error {
	return f.core.SetDeadlines("set deadline", t, &f.core.ReadDL, &f.core.WriteDL)
}

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (f *connFace) SetReadDeadline(t time.Time) error {
	return f.core.SetDeadlines("set read deadline", t, &f.core.ReadDL, nil)
}

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (f *connFace) SetWriteDeadline(t time.Time) error {
	return f.core.SetDeadlines("set write deadline", t, &f.core.WriteDL, nil)
}

// opErr is err as the *net.OpError of the connection's operation op.
func (f *connFace) opErr(op string, err error) error { return f.core.OpErr(op, err) }

// trafficClass is what either wire's TrafficClass reports: the traffic
// class e's queue pair says its packets carry.
func (f *connFace) trafficClass(e *endpoint) (int, error) {
	f.core.Mu.Lock()
	defer f.core.Mu.Unlock()
	if f.core.Closed || f.core.Torn {
		return 0, f.opErr("traffic class", net.ErrClosed)
	}
	a, err := e.ep.QP.Query()
	if err != nil {
		return 0, f.opErr("traffic class", err)
	}
	return a.TrafficClass, nil
}
