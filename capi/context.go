package capi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rdmanet/rdma/collectives"
)

// Context is one endpoint of the C-style API: a server that accepts peers or
// a client that connects to them. Create it with Init and release it with
// Close.
type Context struct {
	tr       transport
	ip       net.IP
	bufSize  int
	isServer bool
	ln       net.Listener // server only

	// acceptMu serializes AcceptPeer so that accepted peers get their
	// indexes in accept order.
	acceptMu sync.Mutex

	// groupMu serializes GroupInit and the group's collectives; groupRef
	// lets Close end a group whose operation holds groupMu.
	groupMu  sync.Mutex
	group    *collectives.Group
	groupRef atomic.Pointer[collectives.Group]

	// collMu serializes collectives, which share the scratch list live.
	collMu sync.Mutex
	live   []*peer
	parts  int // participants in the last all-to-all

	mu        sync.Mutex
	peers     []*peer // by index; never shrinks, a disconnected peer stays
	reserved  int     // connections under way, counted against MaxPeers
	replacing map[int]bool
	inFlight  int            // asynchronous requests not completed
	async     sync.WaitGroup // their goroutines
	closed    bool

	trafficClass atomic.Int32 // SetTrafficClass's (qos.go)

	// One-sided memory and exposures (onesided.go).
	mems      map[*Mem]struct{}
	exposures map[Desc]*exposure
}

// Init creates a context. A server (isServer) listens on ip:port at once; a
// client uses ip as the source address of its connections and ignores port.
// bufSize bounds the size of every message the context sends and must be in
// 1..MaxBufSize.
func Init(ip string, port int, bufSize int, isServer bool) (*Context, error) {
	return initWith(defaultTransport, ip, port, bufSize, isServer)
}

func initWith(tr transport, ip string, port int, bufSize int, isServer bool) (*Context, error) {
	if ip == "" {
		return nil, fmt.Errorf("capi: init: %w: ip is empty", ErrInvalidArgument)
	}
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, fmt.Errorf("capi: init: %w: %q is not an IP address", ErrInvalidArgument, ip)
	}
	if bufSize <= 0 || bufSize > MaxBufSize {
		return nil, fmt.Errorf("capi: init: %w: buffer size %d is not in 1..%d", ErrInvalidArgument, bufSize, MaxBufSize)
	}
	c := &Context{tr: tr, ip: addr, bufSize: bufSize, isServer: isServer}
	if isServer {
		if port < 0 || port > 65535 {
			return nil, fmt.Errorf("capi: init: %w: port %d is not in 0..65535", ErrInvalidArgument, port)
		}
		ln, err := tr.listen(joinHostPort(addr, port))
		if err != nil {
			return nil, fmt.Errorf("capi: init: listen on %s: %w", joinHostPort(addr, port), err)
		}
		c.ln = ln
	}
	return c, nil
}

// Addr is the address a server context listens on (its port is the real one
// when Init was given port 0), or nil for a client context.
func (c *Context) Addr() net.Addr {
	if c.ln == nil {
		return nil
	}
	return c.ln.Addr()
}

// BufSize is the context's message size bound, as given to Init.
func (c *Context) BufSize() int { return c.bufSize }

// IsServer tells whether the context was created as a server.
func (c *Context) IsServer() bool { return c.isServer }

// ConnectPeer connects to a server context at ip:port, from the context's own
// IP, and returns the new peer's index. It gives up after DialTimeout.
func (c *Context) ConnectPeer(ip string, port int) (int, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return -1, fmt.Errorf("capi: connect: %w: %q is not an IP address", ErrInvalidArgument, ip)
	}
	if port <= 0 || port > 65535 {
		return -1, fmt.Errorf("capi: connect: %w: port %d is not in 1..65535", ErrInvalidArgument, port)
	}
	if err := c.reserve("connect"); err != nil {
		return -1, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	conn, err := c.tr.dial(ctx, c.ip, joinHostPort(addr, port), int(c.trafficClass.Load()))
	if err != nil {
		c.unreserve()
		return -1, fmt.Errorf("capi: connect to %s from %s: %w", joinHostPort(addr, port), c.ip, connectError{err})
	}
	return c.add("connect", conn)
}

// AcceptPeer waits for the next client of a server context and returns its
// peer index. Close unblocks it.
func (c *Context) AcceptPeer() (int, error) {
	if !c.isServer {
		return -1, fmt.Errorf("capi: accept: %w", ErrNotServer)
	}
	c.acceptMu.Lock()
	defer c.acceptMu.Unlock()
	if err := c.reserve("accept"); err != nil {
		return -1, err
	}
	conn, err := c.ln.Accept()
	if err != nil {
		c.unreserve()
		if c.isClosed() || errors.Is(err, net.ErrClosed) {
			return -1, fmt.Errorf("capi: accept: %w", ErrClosed)
		}
		return -1, fmt.Errorf("capi: accept: %w", err)
	}
	return c.add("accept", conn)
}

// reserve claims room for one more peer before a connection is made, so that
// concurrent connects cannot exceed MaxPeers.
func (c *Context) reserve(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	if len(c.peers)+c.reserved >= MaxPeers {
		return fmt.Errorf("capi: %s: %w", op, ErrTooManyPeers)
	}
	c.reserved++
	return nil
}

func (c *Context) unreserve() {
	c.mu.Lock()
	c.reserved--
	c.mu.Unlock()
}

// add gives a new connection the next peer index.
func (c *Context) add(op string, conn net.Conn) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reserved--
	if c.closed {
		conn.Close()
		return -1, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	p := newPeer(len(c.peers), conn, c.bufSize)
	c.peers = append(c.peers, p)
	return p.idx, nil
}

// ReconnectPeer connects again to a server at ip:port, from the context's
// IP, as peer idx: an index whose peer is gone (its connection failed) or
// was disconnected. The context's other peers are untouched.
func (c *Context) ReconnectPeer(idx int, ip string, port int) error {
	addr := net.ParseIP(ip)
	if addr == nil {
		return fmt.Errorf("capi: reconnect: %w: %q is not an IP address", ErrInvalidArgument, ip)
	}
	if port <= 0 || port > 65535 {
		return fmt.Errorf("capi: reconnect: %w: port %d is not in 1..65535", ErrInvalidArgument, port)
	}
	if err := c.claim("reconnect", idx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	conn, err := c.tr.dial(ctx, c.ip, joinHostPort(addr, port), int(c.trafficClass.Load()))
	if err != nil {
		c.release(idx, nil)
		return fmt.Errorf("capi: reconnect peer %d to %s from %s: %w", idx, joinHostPort(addr, port), c.ip, connectError{err})
	}
	return c.release(idx, conn)
}

// AcceptPeerAt waits for the next client of a server context and makes it
// peer idx: an index whose peer is gone (its connection failed) or was
// disconnected. Close unblocks it.
func (c *Context) AcceptPeerAt(idx int) error {
	if !c.isServer {
		return fmt.Errorf("capi: accept: %w", ErrNotServer)
	}
	c.acceptMu.Lock()
	defer c.acceptMu.Unlock()
	if err := c.claim("accept at", idx); err != nil {
		return err
	}
	conn, err := c.ln.Accept()
	if err != nil {
		c.release(idx, nil)
		if c.isClosed() || errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("capi: accept at peer %d: %w", idx, ErrClosed)
		}
		return fmt.Errorf("capi: accept at peer %d: %w", idx, err)
	}
	return c.release(idx, conn)
}

// claim reserves index idx, whose peer must be gone or disconnected, for a
// new connection.
func (c *Context) claim(op string, idx int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return fmt.Errorf("capi: %s: %w", op, ErrClosed)
	case idx < 0 || idx >= len(c.peers):
		return fmt.Errorf("capi: %s peer %d: %w (the context has %d peers)", op, idx, ErrNoSuchPeer, len(c.peers))
	case c.replacing[idx]:
		return fmt.Errorf("capi: %s peer %d: %w: another call is connecting it", op, idx, ErrPeerConnected)
	case !c.peers[idx].isClosed():
		return fmt.Errorf("capi: %s peer %d: %w: the peer is connected (disconnect it first)", op, idx, ErrPeerConnected)
	}
	if c.replacing == nil {
		c.replacing = map[int]bool{}
	}
	c.replacing[idx] = true
	return nil
}

// release ends a claim on idx: with conn, the new connection becomes peer
// idx.
func (c *Context) release(idx int, conn net.Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.replacing, idx)
	if conn == nil {
		return nil
	}
	if c.closed {
		conn.Close()
		return fmt.Errorf("capi: connect peer %d: %w", idx, ErrClosed)
	}
	c.peers[idx] = newPeer(idx, conn, c.bufSize)
	return nil
}

// DisconnectPeer closes the connection to peer idx, or acknowledges that a
// gone peer is gone. The index stays taken; later calls on it fail with
// ErrPeerDisconnected until ReconnectPeer or AcceptPeerAt gives it a new
// connection.
func (c *Context) DisconnectPeer(idx int) error {
	p, err := c.slot("disconnect", idx)
	if err != nil {
		return err
	}
	if !p.disconnect() {
		return fmt.Errorf("capi: disconnect peer %d: %w", idx, ErrPeerDisconnected)
	}
	return nil
}

// peer returns the live peer idx, or an error that says why there is none.
func (c *Context) peer(op string, idx int) (*peer, error) {
	p, err := c.slot(op, idx)
	switch {
	case err != nil:
		return nil, err
	case p.state.Load() == peerGone:
		return nil, p.goneError(op)
	case p.isClosed():
		return nil, fmt.Errorf("capi: %s peer %d: %w", op, idx, ErrPeerDisconnected)
	}
	return p, nil
}

// slot returns the peer at index idx whatever its state, or an error if
// the context is closed or has no peer there.
func (c *Context) slot(op string, idx int) (*peer, error) {
	c.mu.Lock()
	closed, n := c.closed, len(c.peers)
	var p *peer
	if idx >= 0 && idx < n {
		p = c.peers[idx]
	}
	c.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	case p == nil:
		return nil, fmt.Errorf("capi: %s peer %d: %w (the context has %d peers)", op, idx, ErrNoSuchPeer, n)
	}
	return p, nil
}

// livePeers returns the connected peers in index order, appended to dst.
func (c *Context) livePeers(op string, dst []*peer) ([]*peer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return dst, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	for _, p := range c.peers {
		if !p.isClosed() {
			dst = append(dst, p)
		}
	}
	if len(dst) == 0 {
		return dst, fmt.Errorf("capi: %s: %w", op, ErrNoPeers)
	}
	return dst, nil
}

func (c *Context) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close stops listening and closes every peer connection; blocked calls
// return ErrClosed or ErrPeerDisconnected, and pending asynchronous requests
// complete with errors that match ErrCanceled. Closing twice is a no-op.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	peers := c.peers
	c.mu.Unlock()

	var first error
	if c.ln != nil {
		if err := c.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			first = err
		}
	}
	if g := c.groupRef.Load(); g != nil {
		g.Close()
	}
	for _, p := range peers {
		p.disconnect()
	}
	// Every pending request ends now: those under way fail as their conns
	// close, the others are cancelled before they start.
	c.async.Wait()
	c.mu.Lock()
	mems := slices.Collect(maps.Keys(c.mems))
	c.mu.Unlock()
	for _, m := range mems {
		m.freeOnClose()
	}
	if first != nil {
		return fmt.Errorf("capi: close: %w", first)
	}
	return nil
}
