package rdma

import (
	"net"
	"sync"
	"time"
)

// connFace is what a connection of either wire (Conn, RsocketConn) shows
// as a net.Conn beyond Read and Write, and the state that goes with it:
// the provider and fallback, the addresses, Close's flag and channel, the
// deadlines, the wake-ups of waiting Reads and Writes, and the
// *net.OpError its errors come in. Its mu is the connection's lock: each
// wire's own state is guarded by it too.
type connFace struct {
	provider     string
	fallback     error // why an auto dial fell back to soft (mixed.go)
	laddr, raddr *Addr

	mu       sync.Mutex
	closed   bool
	torn     bool          // verbs objects destroyed
	rcvReady chan struct{} // poked when the receive side changed
	sndReady chan struct{} // poked when send resources were freed
	closedCh chan struct{} // closed by Close
	rdl, wdl deadline

	stats *connStats // stats.go
}

// init readies the face of a connection carried by provider.
func (f *connFace) init(provider string) {
	f.provider = provider
	f.rcvReady = make(chan struct{}, 1)
	f.sndReady = make(chan struct{}, 1)
	f.closedCh = make(chan struct{})
	f.rdl, f.wdl = makeDeadline(), makeDeadline()
	f.stats = newConnStats() // stats.go
}

// established takes in the addresses of the connection on id, once it is
// established.
func (f *connFace) established(laddr, raddr *net.TCPAddr) {
	f.laddr, f.raddr = fromTCPAddr(laddr), fromTCPAddr(raddr)
	f.stats.opened = time.Now()
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

// stopDeadlines stops the deadlines' timers: Close's last step.
func (f *connFace) stopDeadlines() {
	f.rdl.stop()
	f.wdl.stop()
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
func (f *connFace) Fallback() error {
	if f.fallback == nil {
		return nil
	}
	return f.fallback
}

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

func (f *connFace) setDeadlines(op string, t time.Time, a, b *deadline) error {
	if err := f.checkOpen(op); err != nil {
		return err
	}
	a.set(t)
	if b != nil {
		b.set(t)
	}
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
	var src, dst net.Addr
	if f.laddr != nil {
		src = f.laddr
	}
	if f.raddr != nil {
		dst = f.raddr
	}
	return opError(op, src, dst, err)
}
