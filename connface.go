package rdma

import (
	"net"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/core"
)

// connFace is what a connection of either wire (Conn, RsocketConn) shows
// as a net.Conn over the state both wires share (core, internal/core's
// Conn: the locks, Close's flag, the failure, the deadlines, the wake-ups
// of waiting Reads and Writes, the poll role's state): the provider and
// fallback, the addresses, Close's and CloseWrite's steps (closeConn,
// closeWrite), the watch, and the *net.OpError its errors come in.
// core.Mu is the connection's lock: each wire's own state is guarded by
// it too.
type connFace struct {
	provider     string
	fallback     error // why an auto dial fell back to soft (mixed.go)
	laddr, raddr *Addr

	// The state the wires share (internal/core): locks, Close, the
	// failure, deadlines, wake-ups, the poll role and the counters.
	core core.Conn

	// The watch (internal/cmwatch), stopped by Close.
	watch cmwatch.Watch
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
	f.laddr, f.raddr = fromTCPAddr(laddr), fromTCPAddr(raddr)
	f.core.Local, f.core.Remote = f.laddr.netAddr(), f.raddr.netAddr()
	f.core.Counters.Opened = time.Now()
}

// closingConn is a connection of either wire as Close sees it.
type closingConn interface {
	statser // stats.go
	face() *connFace
	poller() core.Poller
	drainTime() time.Duration // HandshakeTimeout
	drain(dl *core.Deadline)  // delivers what was written, within dl
	releaseVerbs()            // once no post or poll is in flight
}

// closeConn is Close for either wire: pending Reads and Writes return
// net.ErrClosed, what was written is delivered (the wire's drain), then
// the connection is disconnected and its verbs resources, ID, event
// channel and watch released.
func closeConn(c closingConn) error {
	f, r := c.face(), c.poller()
	e := r.E
	if err := f.core.MarkClosed(); err != nil {
		return err
	}
	r.LookAgain() // a sleeping poll role holder sees the Close
	// Wait for Reads and Writes in progress to leave the buffers.
	f.core.ReadMu.Lock()
	defer f.core.ReadMu.Unlock()
	f.core.WriteMu.Lock()
	defer f.core.WriteMu.Unlock()
	dl := core.MakeDeadline()
	dl.Set(time.Now().Add(c.drainTime()))
	c.drain(&dl)
	dl.Stop()
	_ = e.ID.Disconnect()
	c.releaseVerbs()
	e.ID.Destroy()
	e.Events.Close() // ends cmLoop, or the timed watch's events
	f.watch.Stop()
	f.core.ReadDL.Stop()
	f.core.WriteDL.Stop()
	unregister(c) // registry.go
	return nil
}

// face is the connection's face, for closeConn.
func (f *connFace) face() *connFace { return f }

// LocalAddr returns the local address.
func (f *connFace) LocalAddr() net.Addr { return f.laddr }

// RemoteAddr returns the peer's address.
func (f *connFace) RemoteAddr() net.Addr { return f.raddr }

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

// writeShutter is a wire's side of CloseWrite (closeWrite); its methods
// but flush are called with mu held.
type writeShutter interface {
	writeShutLocked() bool          // the sending side is shut already
	shutWriteLocked() (bool, error) // shuts it if there is room: done, and the post's error
	flush() error                   // posts what shutWriteLocked queued
}

// closeWrite is CloseWrite for either wire: it shuts the sending side once
// there is room to say so, waiting for it as a Write does.
func closeWrite(f *connFace, r core.Poller, w writeShutter) error {
	f.core.WriteMu.Lock()
	defer f.core.WriteMu.Unlock()
	for {
		f.core.Mu.Lock()
		var err error
		switch {
		case f.core.Closed:
			err = net.ErrClosed
		case w.writeShutLocked():
		case f.core.Err != nil:
			err = f.core.Err
		default:
			done, perr := w.shutWriteLocked()
			if !done {
				f.core.Mu.Unlock()
				r.Await(f.core.SndReady, nil, false)
				continue
			}
			if err = perr; err == nil {
				f.core.Mu.Unlock()
				err = w.flush()
				f.core.Mu.Lock()
			}
		}
		f.core.Mu.Unlock()
		if err != nil {
			return f.opErr("close", err)
		}
		return nil
	}
}

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
