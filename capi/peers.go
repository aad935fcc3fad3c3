package capi

import (
	"fmt"
	"net"
	"sync"
)

// peerTable is a context's peers by index and its lifecycle: it hands out
// indexes (in the order connections complete), holds room for connections
// under way against MaxPeers, lets a gone or disconnected index be taken
// again, and says once the context is closed. An index never goes away: a
// disconnected peer stays until a new connection replaces it.
type peerTable struct {
	bufSize int // of every peer's messages

	mu        sync.Mutex
	peers     []*peer // by index; never shrinks
	reserved  int     // connections under way, counted against MaxPeers
	replacing map[int]bool
	closed    bool
}

func newPeerTable(bufSize int) *peerTable {
	return &peerTable{bufSize: bufSize}
}

// reserve claims room for one more peer before a connection is made, so that
// concurrent connects cannot exceed MaxPeers.
func (t *peerTable) reserve(op string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	if len(t.peers)+t.reserved >= MaxPeers {
		return fmt.Errorf("capi: %s: %w", op, ErrTooManyPeers)
	}
	t.reserved++
	return nil
}

func (t *peerTable) unreserve() {
	t.mu.Lock()
	t.reserved--
	t.mu.Unlock()
}

// add gives a new connection, made under a reserve, the next peer index.
func (t *peerTable) add(op string, conn net.Conn) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reserved--
	if t.closed {
		conn.Close()
		return -1, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	p := newPeer(len(t.peers), conn, t.bufSize, t.isClosed)
	t.peers = append(t.peers, p)
	return p.idx, nil
}

// claim reserves index idx, whose peer must be gone or disconnected, for a
// new connection.
func (t *peerTable) claim(op string, idx int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return fmt.Errorf("capi: %s: %w", op, ErrClosed)
	case idx < 0 || idx >= len(t.peers):
		return fmt.Errorf("capi: %s peer %d: %w (the context has %d peers)", op, idx, ErrNoSuchPeer, len(t.peers))
	case t.replacing[idx]:
		return fmt.Errorf("capi: %s peer %d: %w: another call is connecting it", op, idx, ErrPeerConnected)
	case !t.peers[idx].isClosed():
		return fmt.Errorf("capi: %s peer %d: %w: the peer is connected (disconnect it first)", op, idx, ErrPeerConnected)
	}
	if t.replacing == nil {
		t.replacing = map[int]bool{}
	}
	t.replacing[idx] = true
	return nil
}

// release ends a claim on idx: with conn, the new connection becomes peer
// idx.
func (t *peerTable) release(idx int, conn net.Conn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.replacing, idx)
	if conn == nil {
		return nil
	}
	if t.closed {
		conn.Close()
		return fmt.Errorf("capi: connect peer %d: %w", idx, ErrClosed)
	}
	t.peers[idx] = newPeer(idx, conn, t.bufSize, t.isClosed)
	return nil
}

// live returns the live peer idx, or an error that says why there is none.
func (t *peerTable) live(op string, idx int) (*peer, error) {
	p, err := t.slot(op, idx)
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
func (t *peerTable) slot(op string, idx int) (*peer, error) {
	t.mu.Lock()
	closed, n := t.closed, len(t.peers)
	var p *peer
	if idx >= 0 && idx < n {
		p = t.peers[idx]
	}
	t.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	case p == nil:
		return nil, fmt.Errorf("capi: %s peer %d: %w (the context has %d peers)", op, idx, ErrNoSuchPeer, n)
	}
	return p, nil
}

// livePeers returns the connected peers in index order, appended to dst.
func (t *peerTable) livePeers(op string, dst []*peer) ([]*peer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return dst, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	for _, p := range t.peers {
		if !p.isClosed() {
			dst = append(dst, p)
		}
	}
	if len(dst) == 0 {
		return dst, fmt.Errorf("capi: %s: %w", op, ErrNoPeers)
	}
	return dst, nil
}

func (t *peerTable) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// close marks the table closed and returns its peers, for the caller to
// disconnect; it reports false, and nothing, when it was closed already.
func (t *peerTable) close() ([]*peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	t.closed = true
	return t.peers, true
}
