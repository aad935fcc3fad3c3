package rdma

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/internal/streamconn"
	"github.com/rdmanet/rdma/verbs"
)

// Conn is a net.Conn carried by an RDMA reliable connection. It is safe for
// concurrent use: Reads are serialised among themselves, Writes too, and a
// Read and a Write run in parallel.
type Conn struct {
	c streamconn.Conn // the wire's engine (internal/streamconn)
}

// newConn sets up a connection on id: its verbs resources, and its
// receives posted (streamconn.Conn.Init, with cfg as the engine takes it).
// cfg has its defaults filled in.
func newConn(provider string, ech verbs.EventChannel, id verbs.CMID, cfg Config, grow bool) (*Conn, error) {
	ec := streamconn.Config{
		RingSize: cfg.RingSize, SendBufferSize: cfg.SendBufferSize,
		SendDepth: cfg.SendDepth, RecvDepth: cfg.RecvDepth,
		InlineThreshold: cfg.InlineThreshold, RendezvousThreshold: cfg.RendezvousThreshold,
		KeepAlive: cfg.KeepAlive, PeerTimeout: cfg.PeerTimeout, HandshakeTimeout: cfg.HandshakeTimeout,
		PollTime: cfg.pollTime(), BusyPoll: cfg.busyPoll(),
	}
	c := new(Conn)
	if err := c.c.Init(provider, ech, id, ec, grow); err != nil {
		return nil, err
	}
	return c, nil
}

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has closed its sending side and everything before
// that was read.
func (c *Conn) Read(b []byte) (int, error) { return c.c.Read(b) }

// Write writes b to the connection. It returns once all of b is posted to the
// send queue (copied into registered memory, so b may be reused), or with an
// error; a short count comes with the error. A b of at least
// Config.RendezvousThreshold bytes inside a Buffer is not copied: the peer
// reads it from there (rndv.go), and Write returns once it has, with b's
// exposure to the peer revoked. No buffer absorbs such a Write: it waits
// for the peer's Read, so two ends that both write one before reading
// deadlock (as MPI's rendezvous sends do). A deadline or Close that cuts
// such a Write short fails the connection (the peer may be mid-read).
func (c *Conn) Write(b []byte) (int, error) { return c.c.Write(b) }

// CloseWrite shuts down the sending side, as (*net.TCPConn).CloseWrite does:
// the peer reads what was written, then io.EOF; reading goes on.
func (c *Conn) CloseWrite() error { return c.c.CloseWrite() }

// Close closes the connection. Bytes already written are delivered (within
// HandshakeTimeout), then the peer reads io.EOF. Pending Reads and Writes
// return net.ErrClosed.
func (c *Conn) Close() error { return closed(c, c.c.Close()) }

// TrafficClass is the traffic class (IP type of service) the connection's
// packets carry, as its queue pair reports it: the address vector's on
// rdmacore, the TCP socket's IP_TOS read back on soft. See
// Config.TrafficClass.
func (c *Conn) TrafficClass() (int, error) { return c.c.TrafficClass() }

// Stats returns what the connection has done so far and its sizes now. It
// takes the connection's lock briefly; the data path keeps running.
func (c *Conn) Stats() ConnStats { return ConnStats(c.c.Stats()) }

// LocalAddr returns the local address.
func (f *Conn) LocalAddr() net.Addr { return asAddr(f.c.LocalAddr()) }

// RemoteAddr returns the peer's address.
func (f *Conn) RemoteAddr() net.Addr { return asAddr(f.c.RemoteAddr()) }

// Provider names the verbs provider that carries the connection: "soft" or
// "rdmacore".
func (f *Conn) Provider() string { return f.c.Provider() }

// Fallback returns a *FallbackError when the connection was dialed with
// provider auto on a host with an RDMA device and is carried by soft because
// the peer did not answer over the RDMA connection manager; else nil.
func (f *Conn) Fallback() error { return f.c.Fallback() }

// SetDeadline sets the read and write deadlines.
func (f *Conn) SetDeadline(t time.Time) error { return f.c.SetDeadline(t) }

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (f *Conn) SetReadDeadline(t time.Time) error { return f.c.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (f *Conn) SetWriteDeadline(t time.Time) error { return f.c.SetWriteDeadline(t) }

// Expose registers n bytes of b at offset off on the connection for the
// peer to access (access: AccessRead, AccessWrite or both) and returns
// their Desc, which only this connection's peer can use. The exposure ends
// with Unexpose, b's Free or the connection's Close, whichever comes first.
func (c *Conn) Expose(b *Buffer, off, n int, access Access) (Desc, error) {
	d, err := c.c.Remote().Expose(b.engine(), off, n, int(access))
	return Desc(d), err
}

// Unexpose ends the exposure d, which Expose on this connection returned.
// Once it returns, nothing touches the range for the peer any more, even
// for an access the peer had under way: that access finished before, or
// fails at the peer (ErrRemoteAccess, or its connection broken). A stalled
// peer cannot make Unexpose wait. A Desc that is not a live exposure of
// this connection fails with ErrBadDesc.
func (c *Conn) Unexpose(d Desc) error { return c.c.Remote().Unexpose(streamconn.Desc(d)) }

// WriteRemote RDMA-writes p, which lies in a Buffer, into the range d
// describes at offset off, and returns once the peer's device has the
// bytes. d must allow AccessWrite and hold len(p) bytes at off.
func (c *Conn) WriteRemote(d Desc, off int, p []byte) error {
	return c.c.Remote().WriteRemote(streamconn.Desc(d), off, p)
}

// WriteRemoteContext is WriteRemote whose wait for a send slot also ends
// when ctx is done (its error then, context.DeadlineExceeded for its
// deadline), having posted nothing. Once posted, the write runs to its
// completion, which the transport's retry timeout bounds.
func (c *Conn) WriteRemoteContext(ctx context.Context, d Desc, off int, p []byte) error {
	return c.c.Remote().WriteRemoteContext(ctx, streamconn.Desc(d), off, p)
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
	return c.c.Remote().WriteRemoteNotify(streamconn.Desc(d), off, p, value)
}

// WriteRemoteNotifyContext is WriteRemoteNotify whose wait for the peer's
// credit (and a send slot) also ends when ctx is done (its error then,
// context.DeadlineExceeded for its deadline), having posted nothing: a
// peer that never takes its notifications holds the caller no longer.
func (c *Conn) WriteRemoteNotifyContext(ctx context.Context, d Desc, off int, p []byte, value uint32) error {
	return c.c.Remote().WriteRemoteNotifyContext(ctx, streamconn.Desc(d), off, p, value)
}

// ReadRemote RDMA-reads len(p) bytes of the range d describes, at offset
// off, into p, which lies in a Buffer. d must allow AccessRead.
func (c *Conn) ReadRemote(d Desc, off int, p []byte) error {
	return c.c.Remote().ReadRemote(streamconn.Desc(d), off, p)
}

// ReadRemoteContext is ReadRemote whose wait for a send slot also ends
// when ctx is done, as WriteRemoteContext's.
func (c *Conn) ReadRemoteContext(ctx context.Context, d Desc, off int, p []byte) error {
	return c.c.Remote().ReadRemoteContext(ctx, streamconn.Desc(d), off, p)
}

// WaitNotify returns the next notification from the peer (its
// WriteRemoteNotify's value and length), in arrival order, waiting for one
// until ctx is done. It fails once the connection is closed or broken, or
// the peer closed its sending side and no notification is left.
func (c *Conn) WaitNotify(ctx context.Context) (value uint32, n int, err error) {
	return c.c.Remote().WaitNotify(ctx)
}

// ReadFrom implements io.ReaderFrom: it reads r until io.EOF (or an error)
// into the connection's send buffer, a chunk at a time, and writes what it
// read as Write would, without copying it again. It returns the bytes
// written; an error of r's is returned as it is, one of the connection's as
// Write's would be.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) { return c.c.ReadFrom(r) }

// WriteTo implements io.WriterTo: it writes everything the peer sends to w
// until the peer's FIN (then it returns nil, as io.Copy expects) or an
// error, handing w the bytes in the receive ring itself.
func (c *Conn) WriteTo(w io.Writer) (int64, error) { return c.c.WriteTo(w) }

// The steps of the dial and the accept (establishing, dialing, wireConn).

func (c *Conn) hello() stream.Hello             { return c.c.Handshake().Hello() }
func (c *Conn) setPeer(h stream.Hello)          { c.c.Handshake().SetPeer(h) }
func (c *Conn) takeAnswer(private []byte) error { return c.c.Handshake().TakeAnswer(private) }
func (c *Conn) rdAtom() int                     { return c.c.RdAtom() }
func (c *Conn) releaseVerbs()                   { c.c.ReleaseVerbs() }
func (c *Conn) peerTakesRDMACM() bool           { return c.c.PeerTakesRDMACM() }

// start runs the connection once it is established, and enters it into
// the registry.
func (c *Conn) start() {
	c.c.Start(netAddrOf)
	register(c) // registry.go
}

// setFallback records why an auto dial fell back to soft.
func (c *Conn) setFallback(fb error) {
	c.c.SetFallback(fb)
	logFallback(asAddr(c.c.RemoteAddr()), fb) // debuglog.go
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

// netAddrOf is a connection manager address as a connection shows it.
func netAddrOf(a *net.TCPAddr) net.Addr { return fromTCPAddr(a).netAddr() }
