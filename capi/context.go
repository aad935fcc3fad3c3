package capi

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Context is one endpoint of the C-style API: a server that accepts peers or
// a client that connects to them. Create it with Init and release it with
// Close.
type Context struct {
	// A context is a face over parts that own their state: the peer table
	// (peers.go; indexes, and whether the context is closed), each peer's
	// message framing (message.go), the asynchronous requests (async.go),
	// the one-sided memory and exposures (onesided.go) and the collectives
	// group (group.go). The context keeps what makes connections (its
	// transport, address, listener and traffic class) and the scratch
	// state of Broadcast and SequentialAllToAll (collective.go).

	tr       transport
	ip       net.IP
	bufSize  int
	isServer bool
	ln       net.Listener // server only

	// acceptMu serializes AcceptPeer so that accepted peers get their
	// indexes in accept order.
	acceptMu sync.Mutex

	trafficClass atomic.Int32 // SetTrafficClass's (qos.go)

	peers    *peerTable
	requests *requestQueue
	remote   *remoteMemory
	group    *membership

	// collMu serializes collectives, which share the scratch list live.
	collMu sync.Mutex
	live   []*peer
	parts  int // participants in the last all-to-all
}

// newContext makes a context's parts; it neither listens nor connects.
func newContext(tr transport, ip net.IP, bufSize int, isServer bool) *Context {
	peers := newPeerTable(bufSize)
	requests := newRequestQueue()
	return &Context{
		tr:       tr,
		ip:       ip,
		bufSize:  bufSize,
		isServer: isServer,
		peers:    peers,
		requests: requests,
		remote:   newRemoteMemory(peers, requests),
		group:    newMembership(peers.isClosed),
	}
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
	c := newContext(tr, addr, bufSize, isServer)
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
	addr, err := serverAddress("connect", ip, port)
	if err != nil {
		return -1, err
	}
	if err := c.peers.reserve("connect"); err != nil {
		return -1, err
	}
	conn, err := c.tr.connect(c.ip, addr, int(c.trafficClass.Load()))
	if err != nil {
		c.peers.unreserve()
		return -1, fmt.Errorf("capi: connect to %s from %s: %w", addr, c.ip, connectError{err})
	}
	return c.peers.add("connect", conn)
}

// serverAddress checks the address of a server to connect to.
func serverAddress(op, ip string, port int) (string, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return "", fmt.Errorf("capi: %s: %w: %q is not an IP address", op, ErrInvalidArgument, ip)
	}
	if port <= 0 || port > 65535 {
		return "", fmt.Errorf("capi: %s: %w: port %d is not in 1..65535", op, ErrInvalidArgument, port)
	}
	return joinHostPort(addr, port), nil
}

// AcceptPeer waits for the next client of a server context and returns its
// peer index. Close unblocks it.
func (c *Context) AcceptPeer() (int, error) {
	if !c.isServer {
		return -1, fmt.Errorf("capi: accept: %w", ErrNotServer)
	}
	c.acceptMu.Lock()
	defer c.acceptMu.Unlock()
	if err := c.peers.reserve("accept"); err != nil {
		return -1, err
	}
	conn, err := c.ln.Accept()
	if err != nil {
		c.peers.unreserve()
		if c.peers.isClosed() || errors.Is(err, net.ErrClosed) {
			return -1, fmt.Errorf("capi: accept: %w", ErrClosed)
		}
		return -1, fmt.Errorf("capi: accept: %w", err)
	}
	return c.peers.add("accept", conn)
}

// ReconnectPeer connects again to a server at ip:port, from the context's
// IP, as peer idx: an index whose peer is gone (its connection failed) or
// was disconnected. The context's other peers are untouched.
func (c *Context) ReconnectPeer(idx int, ip string, port int) error {
	addr, err := serverAddress("reconnect", ip, port)
	if err != nil {
		return err
	}
	if err := c.peers.claim("reconnect", idx); err != nil {
		return err
	}
	conn, err := c.tr.connect(c.ip, addr, int(c.trafficClass.Load()))
	if err != nil {
		c.peers.release(idx, nil)
		return fmt.Errorf("capi: reconnect peer %d to %s from %s: %w", idx, addr, c.ip, connectError{err})
	}
	return c.peers.release(idx, conn)
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
	if err := c.peers.claim("accept at", idx); err != nil {
		return err
	}
	conn, err := c.ln.Accept()
	if err != nil {
		c.peers.release(idx, nil)
		if c.peers.isClosed() || errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("capi: accept at peer %d: %w", idx, ErrClosed)
		}
		return fmt.Errorf("capi: accept at peer %d: %w", idx, err)
	}
	return c.peers.release(idx, conn)
}

// DisconnectPeer closes the connection to peer idx, or acknowledges that a
// gone peer is gone. The index stays taken; later calls on it fail with
// ErrPeerDisconnected until ReconnectPeer or AcceptPeerAt gives it a new
// connection.
func (c *Context) DisconnectPeer(idx int) error {
	p, err := c.peers.slot("disconnect", idx)
	if err != nil {
		return err
	}
	if !p.disconnect() {
		return fmt.Errorf("capi: disconnect peer %d: %w", idx, ErrPeerDisconnected)
	}
	return nil
}

// Close stops listening and closes every peer connection; blocked calls
// return ErrClosed or ErrPeerDisconnected, and pending asynchronous requests
// complete with errors that match ErrCanceled. Closing twice is a no-op.
func (c *Context) Close() error {
	peers, ok := c.peers.close()
	if !ok {
		return nil
	}
	c.requests.close()
	c.remote.close()

	var first error
	if c.ln != nil {
		if err := c.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			first = err
		}
	}
	c.group.close()
	for _, p := range peers {
		p.disconnect()
	}
	// Every pending request ends now: those under way fail as their conns
	// close, the others are cancelled before they start.
	c.requests.wait()
	c.remote.freeAll()
	if first != nil {
		return fmt.Errorf("capi: close: %w", first)
	}
	return nil
}
