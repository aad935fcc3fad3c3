package rdma

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/core"
)

// connFace is what a connection of either wire (Conn, RsocketConn) shows
// as a net.Conn, and the state that goes with it: the provider and
// fallback, the addresses, the serialisation of Reads and of Writes,
// Close's flag and channel and its steps (closeConn), the connection's
// failure, the deadlines, the wake-ups of waiting Reads and Writes, the
// watch, and the *net.OpError its errors come in. Its mu is the
// connection's lock: each wire's own state is guarded by it too.
type connFace struct {
	provider     string
	fallback     error // why an auto dial fell back to soft (mixed.go)
	laddr, raddr *Addr

	rmu sync.Mutex // serialises Read
	wmu sync.Mutex // serialises Write, CloseWrite and Close's drain

	mu       sync.Mutex
	closed   bool
	torn     bool          // verbs objects destroyed
	err      error         // why the connection failed; nil while healthy
	rcvReady chan struct{} // poked when the receive side changed
	sndReady chan struct{} // poked when send resources were freed
	closedCh chan struct{} // closed by Close
	rdl, wdl core.Deadline

	// The watch (internal/cmwatch), stopped by Close.
	watch cmwatch.Watch

	stats *connstats.Counters // apart from the Conn (one allocation with it), so that a Conn keeps to its size class

	// The conversation, which decides whether a wait spins where the
	// completion channel does the spinning (soft's; poller.go):
	// talked counts the messages sent that the peer answers or acts on
	// (data, a rendezvous' descriptor and done), and heard is what talked
	// was when the peer's last such message arrived. Under mu.
	talked, heard uint32

	// lookAgain is the wire's poller's: a deadline set while the poll
	// role's holder sleeps on the completion channel wakes it to look.
	lookAgain func()
}

// talkedLocked notes a message sent that the peer answers or acts on.
func (f *connFace) talkedLocked() { f.talked++ }

// heardLocked notes a message from the peer of that kind.
func (f *connFace) heardLocked() { f.heard = f.talked }

// answerDueLocked reports whether the connection has sent such a message
// since it last heard one: a wait now is likely a wait for the answer.
func (f *connFace) answerDueLocked() bool { return f.talked != f.heard }

// init readies the face of a connection carried by provider and polled by
// r.
func (f *connFace) init(provider string, r poller) {
	f.provider = provider
	f.lookAgain = r.lookAgain
	f.rcvReady = make(chan struct{}, 1)
	f.sndReady = make(chan struct{}, 1)
	f.closedCh = make(chan struct{})
	f.rdl, f.wdl = core.MakeDeadline(), core.MakeDeadline()
	f.stats = new(connstats.Counters)
}

// established takes in the addresses of the connection on id, once it is
// established.
func (f *connFace) established(laddr, raddr *net.TCPAddr) {
	f.laddr, f.raddr = fromTCPAddr(laddr), fromTCPAddr(raddr)
	f.stats.Opened = time.Now()
}

// markClosed is Close's first step: it fails with net.ErrClosed on a
// closed connection, else marks it closed and wakes what waits on
// closedCh.
func (f *connFace) markClosed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.opErr("close", net.ErrClosed)
	}
	f.closed = true
	close(f.closedCh)
	return nil
}

// stopErrLocked says why a Read (dl: rdl) or a Write (wdl) cannot go on
// whatever the wire's state: Close, or the deadline passed.
func (f *connFace) stopErrLocked(dl *core.Deadline) error {
	switch {
	case f.closed:
		return net.ErrClosed
	case dl.Passed():
		return os.ErrDeadlineExceeded
	}
	return nil
}

// closingConn is a connection of either wire as Close sees it.
type closingConn interface {
	statser // stats.go
	poller() poller
	drainTime() time.Duration // HandshakeTimeout
	drain(dl *core.Deadline)  // delivers what was written, within dl
	releaseVerbs()            // once no post or poll is in flight
}

// closeConn is Close for either wire: pending Reads and Writes return
// net.ErrClosed, what was written is delivered (the wire's drain), then
// the connection is disconnected and its verbs resources, ID, event
// channel and watch released.
func closeConn(c closingConn) error {
	r := c.poller()
	f, e := r.f, r.e
	if err := f.markClosed(); err != nil {
		return err
	}
	r.lookAgain() // a sleeping poll role holder sees the Close
	// Wait for Reads and Writes in progress to leave the buffers.
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.wmu.Lock()
	defer f.wmu.Unlock()
	dl := core.MakeDeadline()
	dl.Set(time.Now().Add(c.drainTime()))
	c.drain(&dl)
	dl.Stop()
	_ = e.id.Disconnect()
	c.releaseVerbs()
	e.id.Destroy()
	e.ech.Close() // ends cmLoop, or the timed watch's events
	f.watch.Stop()
	f.rdl.Stop()
	f.wdl.Stop()
	unregister(c) // registry.go
	return nil
}

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
	return f.setDeadlines("set deadline", t, &f.rdl, &f.wdl)
}

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (f *connFace) SetReadDeadline(t time.Time) error {
	return f.setDeadlines("set read deadline", t, &f.rdl, nil)
}

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (f *connFace) SetWriteDeadline(t time.Time) error {
	return f.setDeadlines("set write deadline", t, &f.wdl, nil)
}

func (f *connFace) setDeadlines(op string, t time.Time, a, b *core.Deadline) error {
	if err := f.checkOpen(op); err != nil {
		return err
	}
	a.Set(t)
	if b != nil {
		b.Set(t)
	}
	f.lookAgain()
	return nil
}

func (f *connFace) checkOpen(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.opErr(op, net.ErrClosed)
	}
	return nil
}

func (f *connFace) opErr(op string, err error) error {
	return opError(op, f.laddr.netAddr(), f.raddr.netAddr(), err)
}

// writeShutter is a wire's side of CloseWrite (closeWrite); its methods
// but flush are called with mu held.
type writeShutter interface {
	writeShutLocked() bool          // the sending side is shut already
	shutWriteLocked() (bool, error) // shuts it if there is room: done, and the post's error
	flush() error                   // posts what shutWriteLocked queued
}

// closeWrite is CloseWrite for either wire: it shuts the sending side once
// there is room to say so, waiting for it as a Write does.
func closeWrite(r poller, w writeShutter) error {
	f := r.f
	f.wmu.Lock()
	defer f.wmu.Unlock()
	for {
		f.mu.Lock()
		var err error
		switch {
		case f.closed:
			err = net.ErrClosed
		case w.writeShutLocked():
		case f.err != nil:
			err = f.err
		default:
			done, perr := w.shutWriteLocked()
			if !done {
				f.mu.Unlock()
				r.await(f.sndReady, nil, false)
				continue
			}
			if err = perr; err == nil {
				f.mu.Unlock()
				err = w.flush()
				f.mu.Lock()
			}
		}
		f.mu.Unlock()
		if err != nil {
			return f.opErr("close", err)
		}
		return nil
	}
}

// writeOverLocked is a Write's look before each step, for either wire,
// with mu held (it stays held): whether the Write is over, and its error.
// The wire's writeErrLocked says why it cannot go on; else it is over once
// it posted all of b (n bytes). A Write that posted all of a non-empty b
// is over whatever happened to the connection since, and does not look.
func (f *connFace) writeOverLocked(w interface{ writeErrLocked() error }, sent, n int) (bool, error) {
	if err := w.writeErrLocked(); err != nil {
		return true, f.opErr("write", err)
	}
	return sent == n, nil
}

// readStopLocked is a Read's look before each step, for either wire, with
// mu held (it stays held): the error that ends the Read once Close or the
// deadline has, else nil.
func (f *connFace) readStopLocked() error {
	if e := f.stopErrLocked(&f.rdl); e != nil {
		return f.opErr("read", e)
	}
	return nil
}

// trafficClass is what either wire's TrafficClass reports: the traffic
// class e's queue pair says its packets carry.
func (f *connFace) trafficClass(e *endpoint) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.torn {
		return 0, f.opErr("traffic class", net.ErrClosed)
	}
	a, err := e.qp.Query()
	if err != nil {
		return 0, f.opErr("traffic class", err)
	}
	return a.TrafficClass, nil
}
