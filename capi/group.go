package capi

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma/collectives"
)

// The group invitation a server sends each of its clients in GroupInit, as
// one message on the peer's connection:
//
//	magic "RDCG", version 1, rank uint32, size uint32 (little-endian),
//	secret (1 length byte, then the bytes), root address (1 length byte,
//	then "host:port")
const (
	inviteMagic   = "RDCG"
	inviteVersion = 1
	secretLen     = 32
	maxInvite     = 4 + 1 + 8 + 1 + 255 + 1 + 255
)

// GroupJoinTimeout bounds GroupInit: every participant must call it within
// this time.
const GroupJoinTimeout = 30 * time.Second

// ErrNoGroup is matched by the error of a collective called before
// GroupInit.
var ErrNoGroup = errors.New("no group: call GroupInit first")

type invite struct {
	rank, size int
	secret     []byte
	root       string
}

func appendInvite(b []byte, inv invite) []byte {
	b = append(b, inviteMagic...)
	b = append(b, inviteVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(inv.rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(inv.size))
	b = append(b, byte(len(inv.secret)))
	b = append(b, inv.secret...)
	b = append(b, byte(len(inv.root)))
	return append(b, inv.root...)
}

// parseInvite reads an invitation; every length in it is checked against
// the message.
func parseInvite(b []byte) (inv invite, err error) {
	bad := fmt.Errorf("%w: not a group invitation (every participant must call GroupInit at the same point)", ErrProtocol)
	if len(b) < 4+1+8+1 || string(b[:4]) != inviteMagic || b[4] != inviteVersion {
		return inv, bad
	}
	inv.rank = int(binary.LittleEndian.Uint32(b[5:]))
	inv.size = int(binary.LittleEndian.Uint32(b[9:]))
	rest := b[13:]
	n := int(rest[0])
	if len(rest) < 1+n+1 {
		return inv, bad
	}
	inv.secret = rest[1 : 1+n]
	rest = rest[1+n:]
	m := int(rest[0])
	if len(rest) != 1+m {
		return inv, bad
	}
	inv.root = string(rest[1:])
	if inv.size < 2 || inv.size > MaxPeers+1 || inv.rank < 1 || inv.rank >= inv.size {
		return inv, fmt.Errorf("%w: invitation to rank %d of %d", ErrProtocol, inv.rank, inv.size)
	}
	return inv, nil
}

// GroupInit builds a collectives group over the context's connected peers
// and returns this context's rank in it; every participant calls it at the
// same point, as a collective. A server is rank 0 and its connected clients
// ranks 1..n in peer index order: it invites each client (one message on its
// connection, with the group's size, the client's rank, the address of the
// group's root and a fresh job secret) and the group is then built by
// collectives' bootstrap (a mesh of its own conns; a client's first
// connected peer must be the server). A second GroupInit replaces the group.
func (c *Context) GroupInit() (int, error) {
	b := collectives.Bootstrap{LocalAddr: c.ip.String(), TCP: c.tr.name == tcpTransport.name}
	return c.group.join(b, func() (invite, error) {
		// Collectives share the scratch list, and the invitations must
		// not interleave with their messages.
		c.collMu.Lock()
		defer c.collMu.Unlock()
		live, err := c.peers.livePeers("group init", c.live[:0])
		c.live = live
		switch {
		case err != nil:
			return invite{}, err
		case c.isServer:
			return sendInvites(live, c.ip)
		}
		return receiveInvite(live[0])
	})
}

// membership is a context's collectives group, from GroupInit on.
type membership struct {
	closed func() bool // whether the context is closed

	// mu serializes join and the group's collectives; ref lets close end
	// a group whose operation holds mu.
	mu  sync.Mutex
	g   *collectives.Group
	ref atomic.Pointer[collectives.Group]
}

func newMembership(closed func() bool) *membership {
	return &membership{closed: closed}
}

// join ends the group there is and builds a new one with b, from the
// invitation invited gets.
func (m *membership) join(b collectives.Bootstrap, invited func() (invite, error)) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.g != nil {
		m.g.Close()
		m.g = nil
		m.ref.Store(nil)
	}
	inv, err := invited()
	if err != nil {
		return -1, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), GroupJoinTimeout)
	defer cancel()
	b.Secret = inv.secret
	g, err := b.Join(ctx, inv.rank, inv.size, inv.root)
	if err != nil {
		return -1, fmt.Errorf("capi: group init: %w", err)
	}
	m.g = g
	m.ref.Store(g)
	if m.closed() { // the context's Close ran meanwhile and could not see g
		g.Close()
	}
	return inv.rank, nil
}

// close ends the group, whatever holds it.
func (m *membership) close() {
	if g := m.ref.Load(); g != nil {
		g.Close()
	}
}

// sendInvites sends every client its invitation to a group whose root
// listens on ip, and returns the server's own.
func sendInvites(clients []*peer, ip net.IP) (invite, error) {
	secret := make([]byte, secretLen)
	if _, err := crand.Read(secret); err != nil {
		return invite{}, err
	}
	root, err := freePort(ip)
	if err != nil {
		return invite{}, fmt.Errorf("capi: group init: %w", err)
	}
	inv := invite{rank: 0, size: len(clients) + 1, secret: secret, root: root}
	var msg []byte
	for i, p := range clients {
		msg = appendInvite(msg[:0], invite{rank: i + 1, size: inv.size, secret: secret, root: root})
		if err := p.send(msg); err != nil {
			return invite{}, within("group init", err)
		}
	}
	return inv, nil
}

// receiveInvite receives the server's invitation.
func receiveInvite(server *peer) (invite, error) {
	buf := make([]byte, maxInvite)
	n, err := server.recv(buf, nil)
	if err != nil {
		return invite{}, within("group init", err)
	}
	inv, err := parseInvite(buf[:n])
	if err != nil {
		return invite{}, fmt.Errorf("capi: group init: %w", err)
	}
	return inv, nil
}

// freePort is an address on ip whose port was free a moment ago, for the
// group's root to listen on.
func freePort(ip net.IP) (string, error) {
	ln, err := net.Listen("tcp", joinHostPort(ip, 0))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// with runs op on the group, one collective at a time.
func (m *membership) with(name string, op func(ctx context.Context, g *collectives.Group) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed() {
		return fmt.Errorf("capi: %s: %w", name, ErrClosed)
	}
	if m.g == nil {
		return fmt.Errorf("capi: %s: %w", name, ErrNoGroup)
	}
	if err := op(context.Background(), m.g); err != nil {
		return fmt.Errorf("capi: %s: %w", name, err)
	}
	return nil
}

// shape returns the group's size and this context's rank in it: 0 and -1
// before a group is joined.
func (m *membership) shape() (size, rank int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.g == nil {
		return 0, -1
	}
	return m.g.Size(), m.g.Rank()
}

// GroupSize is the size of the context's group, or 0 before GroupInit.
func (c *Context) GroupSize() int {
	size, _ := c.group.shape()
	return size
}

// GroupRank is this context's rank in its group, or -1 before GroupInit.
func (c *Context) GroupRank() int {
	_, rank := c.group.shape()
	return rank
}

// Barrier returns once every rank of the group has called it.
func (c *Context) Barrier() error {
	return c.group.with("barrier", func(ctx context.Context, g *collectives.Group) error { return g.Barrier(ctx) })
}

// Bcast sends root's buf to every rank's buf (the same length everywhere).
func (c *Context) Bcast(buf []byte, root int) error {
	return c.group.with("bcast", func(ctx context.Context, g *collectives.Group) error { return g.Broadcast(ctx, root, buf) })
}

// AllGather gathers every rank's send into every rank's recv, in rank
// order: len(recv) == size*len(send).
func (c *Context) AllGather(send, recv []byte) error {
	return c.group.with("allgather", func(ctx context.Context, g *collectives.Group) error { return g.AllGather(ctx, send, recv) })
}

// AllReduce is collectives.AllReduce on the context's group.
func AllReduce[T collectives.Number](c *Context, send, recv []T, op collectives.Op) error {
	return c.group.with("allreduce", func(ctx context.Context, g *collectives.Group) error {
		return collectives.AllReduce(ctx, g, send, recv, op)
	})
}

// Reduce is collectives.Reduce on the context's group.
func Reduce[T collectives.Number](c *Context, root int, send, recv []T, op collectives.Op) error {
	return c.group.with("reduce", func(ctx context.Context, g *collectives.Group) error {
		return collectives.Reduce(ctx, g, root, send, recv, op)
	})
}
