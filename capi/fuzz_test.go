package capi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"
)

// byteConn is a net.Conn that reads a fixed input and discards writes.
type byteConn struct{ r *bytes.Reader }

func (c byteConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c byteConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c byteConn) Close() error                     { return nil }
func (c byteConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c byteConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c byteConn) SetDeadline(time.Time) error      { return nil }
func (c byteConn) SetReadDeadline(time.Time) error  { return nil }
func (c byteConn) SetWriteDeadline(time.Time) error { return nil }

func frame(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	return b
}

// FuzzRecv feeds arbitrary bytes from "the network" to Recv: it must never
// panic, never report more bytes than the buffer holds, and after a
// too-long error a retry with a big enough buffer must get that message.
func FuzzRecv(f *testing.F) {
	f.Add(frame([]byte("hello"), nil, []byte("world")), uint16(64))
	f.Add(frame(make([]byte, 300)), uint16(10))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2}, uint16(8))
	f.Add([]byte{0, 0, 0}, uint16(1))
	f.Fuzz(func(t *testing.T, input []byte, bufLen uint16) {
		c := newContext(tcpTransport, net.IPv4(127, 0, 0, 1), BufferSize, false)
		c.peers.peers = []*peer{newPeer(0, byteConn{bytes.NewReader(input)}, c.bufSize, c.peers.isClosed)}
		buf := make([]byte, bufLen)
		for range len(input) + 1 {
			n, err := c.Recv(0, buf)
			if errors.Is(err, ErrMessageTooLong) {
				pending := c.peers.peers[0].pending
				if pending <= len(buf) {
					t.Fatalf("too long for %d bytes, but %d are pending", len(buf), pending)
				}
				if pending > len(input) {
					return // cannot be in the input; the next read fails
				}
				buf = make([]byte, pending)
				continue
			}
			if err != nil {
				return
			}
			if n < 0 || n > len(buf) {
				t.Fatalf("Recv returned %d for a %d-byte buffer", n, len(buf))
			}
		}
	})
}
