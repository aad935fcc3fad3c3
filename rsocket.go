package rdma

import (
	"net"
	"time"

	"github.com/rdmanet/rdma/internal/rsocketconn"
	"github.com/rdmanet/rdma/verbs"
)

// RsocketConn is a net.Conn that speaks rdma-core's rsockets protocol
// (Config.Wire = "rsocket"), so that its peer may be a C program using
// rsockets: rstream, or any TCP program run with
// LD_PRELOAD=librspreload.so. It behaves as Conn does: deadlines,
// net.ErrClosed after Close, *net.OpError with Net "rdma", CloseWrite as
// rsockets' shutdown(SHUT_WR), io.EOF after the peer's shutdown or close.
// Reads are serialised among themselves, Writes too; a Read and a Write run
// in parallel.
type RsocketConn struct {
	c rsocketconn.Conn // the wire's engine (internal/rsocketconn)
}

// newRsocketConn sets up the verbs resources on id (device known) and posts
// the receives (rsocketconn.Conn.Init).
func newRsocketConn(provider string, ech verbs.EventChannel, id verbs.CMID, p rsocketconn.Params) (*RsocketConn, error) {
	c := new(RsocketConn)
	if err := c.c.Init(provider, ech, id, p); err != nil {
		return nil, err
	}
	return c, nil
}

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has shut down its sending side (or closed, or
// disconnected) and everything before that was read.
func (c *RsocketConn) Read(b []byte) (int, error) { return c.c.Read(b) }

// Write writes b. It returns once all of b is posted (copied into
// registered memory), or with an error and the count posted before it.
func (c *RsocketConn) Write(b []byte) (int, error) { return c.c.Write(b) }

// CloseWrite shuts down the sending side, as rsockets' shutdown(SHUT_WR)
// and (*net.TCPConn).CloseWrite do: the peer reads what was written, then
// EOF; reading goes on.
func (c *RsocketConn) CloseWrite() error { return c.c.CloseWrite() }

// Close closes the connection: the bytes written are delivered (within
// Config.HandshakeTimeout), the peer is told DISCONNECT and reads EOF.
// Pending Reads and Writes return net.ErrClosed.
func (c *RsocketConn) Close() error { return closed(c, c.c.Close()) }

// LocalAddr returns the local address.
func (f *RsocketConn) LocalAddr() net.Addr { return asAddr(f.c.LocalAddr()) }

// RemoteAddr returns the peer's address.
func (f *RsocketConn) RemoteAddr() net.Addr { return asAddr(f.c.RemoteAddr()) }

// Provider names the verbs provider that carries the connection: "soft" or
// "rdmacore".
func (f *RsocketConn) Provider() string { return f.c.Provider() }

// Fallback returns a *FallbackError when the connection was dialed with
// provider auto on a host with an RDMA device and is carried by soft because
// the peer did not answer over the RDMA connection manager; else nil.
func (f *RsocketConn) Fallback() error { return f.c.Fallback() }

// SetDeadline sets the read and write deadlines.
func (f *RsocketConn) SetDeadline(t time.Time) error { return f.c.SetDeadline(t) }

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (f *RsocketConn) SetReadDeadline(t time.Time) error { return f.c.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (f *RsocketConn) SetWriteDeadline(t time.Time) error { return f.c.SetWriteDeadline(t) }

// TrafficClass is the traffic class (IP type of service) the connection's
// packets carry, as its queue pair reports it (see Conn.TrafficClass and
// Config.TrafficClass, which both ends of the rsocket wire take too).
func (c *RsocketConn) TrafficClass() (int, error) { return c.c.TrafficClass() }

// Stats returns what the connection has done so far. The rsocket wire has
// no ring growth or heartbeats: those fields stay zero. Its Reads poll as
// Conn's do and are counted the same way (at once, handed over, spun,
// slept). A message is one data write on the wire
// (rsocket.c's: at most a granted region's rest, the send buffer's
// contiguous room and RS_MAX_TRANSFER), and CreditWaits counts Writes
// that waited for a credit, a region, send buffer room or a queue slot.
func (c *RsocketConn) Stats() ConnStats { return ConnStats(c.c.Stats()) }

// The steps of the dial and the accept (establishing, dialing, wireConn).

func (c *RsocketConn) takeAnswer(private []byte) error { return c.c.TakeAnswer(private) }
func (c *RsocketConn) releaseVerbs()                   { c.c.ReleaseVerbs() }
func (c *RsocketConn) peerTakesRDMACM() bool           { return false } // rsocket's connection data has no such flag

// start runs the connection once it is established, and enters it into
// the registry.
func (c *RsocketConn) start() {
	c.c.Start()
	register(c) // registry.go
}

// setFallback records why an auto dial fell back to soft.
func (c *RsocketConn) setFallback(fb error) {
	c.c.SetFallback(fb)
	logFallback(asAddr(c.c.RemoteAddr()), fb) // debuglog.go
}
