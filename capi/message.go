package capi

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

const (
	headerLen = 4
	// maxCoalesce bounds the per-peer buffer that lets a header and a small
	// payload leave in one Write; longer messages go out as two Writes.
	maxCoalesce = 64 << 10
	// readBufSize is the per-peer read buffer: a small message and the next
	// header usually arrive in one Read.
	readBufSize = 16 << 10
)

// noMessage marks a peer with no message header read ahead.
const noMessage = -1

// States of a peer: live until the caller disconnects it or its
// connection fails (gone). A gone or disconnected index may get a new
// connection: ReconnectPeer, AcceptPeerAt.
const (
	peerLive int32 = iota
	peerGone
	peerDisconnected
)

// peer is one connection and its framing state: it sends and receives
// whole messages on it.
type peer struct {
	idx     int
	conn    net.Conn
	bufSize int         // the longest message it sends
	closing func() bool // whether its context is closed (its table's isClosed)
	state   atomic.Int32
	cause   atomic.Pointer[error] // why a gone peer went

	sendMu sync.Mutex
	wbuf   []byte // header + payload of messages up to cap(wbuf)-headerLen

	// Asynchronous requests, in the order they were posted.
	sendFIFO, recvFIFO fifo

	recvMu  sync.Mutex
	r       *bufio.Reader
	hdr     [headerLen]byte
	pending int // length of the next message once its header is read, else noMessage
}

func newPeer(idx int, conn net.Conn, bufSize int, closing func() bool) *peer {
	p := &peer{
		idx:     idx,
		conn:    conn,
		bufSize: bufSize,
		closing: closing,
		wbuf:    make([]byte, headerLen+min(bufSize, maxCoalesce)),
		r:       bufio.NewReaderSize(conn, readBufSize),
		pending: noMessage,
	}
	p.sendFIFO.init()
	p.recvFIFO.init()
	return p
}

func (p *peer) isClosed() bool { return p.state.Load() != peerLive }

// disconnect closes the connection of a live peer, or acknowledges a gone
// one; it reports whether the peer was either.
func (p *peer) disconnect() bool {
	if p.state.CompareAndSwap(peerLive, peerDisconnected) {
		p.conn.Close()
		return true
	}
	return p.state.CompareAndSwap(peerGone, peerDisconnected)
}

// lose marks a live peer gone because its connection failed with err, and
// closes the connection: the context's other peers go on.
func (p *peer) lose(err error) {
	p.cause.Store(&err)
	if p.state.CompareAndSwap(peerLive, peerGone) {
		p.conn.Close()
	}
}

// goneError explains a call on a gone peer.
func (p *peer) goneError(op string) error {
	cause := errors.New("connection failed")
	if e := p.cause.Load(); e != nil {
		cause = *e
	}
	return fmt.Errorf("capi: %s peer %d: %w (%v); reconnect or accept a replacement at this index", op, p.idx, ErrPeerGone, cause)
}

// Send sends data as one message to peer idx and returns len(data). A message
// longer than the context's buffer size fails with ErrMessageTooLong.
func (c *Context) Send(idx int, data []byte) (int, error) {
	p, err := c.peers.live("send to", idx)
	if err != nil {
		return -1, err
	}
	if err := p.send(data); err != nil {
		return -1, err
	}
	return len(data), nil
}

// Recv receives one whole message from peer idx into buf and returns its
// length. A message longer than buf fails with ErrMessageTooLong and stays
// queued: a later Recv with a big enough buffer receives it.
func (c *Context) Recv(idx int, buf []byte) (int, error) {
	p, err := c.peers.live("recv from", idx)
	if err != nil {
		return -1, err
	}
	return p.recv(buf, nil)
}

// send sends data as one message.
func (p *peer) send(data []byte) error {
	if len(data) > p.bufSize {
		return fmt.Errorf("capi: send to peer %d: %w: %d bytes exceed the context's buffer size of %d bytes",
			p.idx, ErrMessageTooLong, len(data), p.bufSize)
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	binary.BigEndian.PutUint32(p.wbuf[:headerLen], uint32(len(data)))
	var err error
	if headerLen+len(data) <= len(p.wbuf) {
		n := copy(p.wbuf[headerLen:], data)
		_, err = p.conn.Write(p.wbuf[:headerLen+n])
	} else if _, err = p.conn.Write(p.wbuf[:headerLen]); err == nil {
		_, err = p.conn.Write(data)
	}
	if err != nil {
		return p.ioError("send to", err)
	}
	return nil
}

// recv receives the next message. check, if not nil, vets the message
// length before anything is consumed; a refused message stays queued.
func (p *peer) recv(buf []byte, check func(n int) error) (int, error) {
	p.recvMu.Lock()
	defer p.recvMu.Unlock()
	if p.pending == noMessage {
		if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
			return -1, p.ioError("recv from", err)
		}
		n := binary.BigEndian.Uint32(p.hdr[:])
		if n > MaxBufSize {
			// No capi peer sends this: the stream is not ours, or is
			// corrupt, and cannot be resynchronized.
			p.disconnect()
			return -1, fmt.Errorf("capi: recv from peer %d: %w: message length %d exceeds %d; peer disconnected",
				p.idx, ErrProtocol, n, MaxBufSize)
		}
		p.pending = int(n)
	}
	n := p.pending
	if check != nil {
		if err := check(n); err != nil {
			return -1, fmt.Errorf("capi: recv from peer %d: %w (the message stays queued)", p.idx, err)
		}
	}
	if n > len(buf) {
		return -1, fmt.Errorf("capi: recv from peer %d: %w: the %d-byte message does not fit in %d bytes (it stays queued; retry with a bigger buffer)",
			p.idx, ErrMessageTooLong, n, len(buf))
	}
	if _, err := io.ReadFull(p.r, buf[:n]); err != nil {
		return -1, p.ioError("recv from", err)
	}
	p.pending = noMessage
	return n, nil
}

// ioError explains a failed read or write on p's connection. Unless this
// side closed it, the peer is gone: its connection is closed, and later
// calls on it fail with ErrPeerGone until it is replaced.
func (p *peer) ioError(op string, err error) error {
	switch {
	case p.closing():
		return fmt.Errorf("capi: %s peer %d: %w", op, p.idx, ErrClosed)
	case p.state.Load() == peerDisconnected:
		return fmt.Errorf("capi: %s peer %d: %w", op, p.idx, ErrPeerDisconnected)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("the peer closed the connection: %w", err)
	}
	p.lose(err)
	return fmt.Errorf("capi: %s peer %d: %w (%w)", op, p.idx, err, ErrPeerGone)
}
