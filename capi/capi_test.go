package capi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rdmanet/rdma"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if role, ok := os.LookupEnv(hostileEnv); ok {
		os.Exit(runHostile(role))
	}
	goleak.VerifyTestMain(m)
}

// transports lists what the tests run over: the default (rdma conns) and
// plain TCP, the seam's baseline.
func transports() []transport {
	if defaultTransport.name == tcpTransport.name {
		return []transport{tcpTransport}
	}
	return []transport{defaultTransport, tcpTransport}
}

// forEachTransport runs fn once per transport as a subtest.
func forEachTransport(t *testing.T, fn func(t *testing.T, tr transport)) {
	for _, tr := range transports() {
		t.Run(tr.name, func(t *testing.T) { fn(t, tr) })
	}
}

// clientIPs are loopback addresses standing in for client hosts.
var clientIPs = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}

// star is a server with clients connected in order: client i is the
// server's peer i, and the server is every client's peer 0.
type star struct {
	server  *Context
	clients []*Context
	port    int
}

func newStar(t *testing.T, tr transport, nClients, bufSize int) *star {
	t.Helper()
	srv, err := initWith(tr, "127.0.0.1", 0, bufSize, true)
	require.NoError(t, err)
	s := &star{server: srv, port: portOf(t, srv.Addr())}
	t.Cleanup(func() { s.close() })
	for i := 0; i < nClients; i++ {
		cl, err := initWith(tr, clientIPs[i%len(clientIPs)], 0, bufSize, false)
		require.NoError(t, err)
		s.clients = append(s.clients, cl)
		idx, err := cl.ConnectPeer("127.0.0.1", s.port)
		require.NoError(t, err)
		require.Equal(t, 0, idx)
		idx, err = srv.AcceptPeer()
		require.NoError(t, err)
		require.Equal(t, i, idx)
	}
	return s
}

func (s *star) close() {
	for _, c := range s.clients {
		c.Close()
	}
	s.server.Close()
}

func TestInitErrors(t *testing.T) {
	for _, tc := range []struct {
		name, ip string
		port     int
		bufSize  int
		server   bool
		want     string
	}{
		{"empty ip", "", 1, 64, true, "ip is empty"},
		{"bad ip", "not-an-ip", 1, 64, false, `"not-an-ip" is not an IP address`},
		{"zero buffer", "127.0.0.1", 0, 0, true, "buffer size 0 is not in 1..1073741824"},
		{"negative buffer", "127.0.0.1", 0, -5, false, "buffer size -5"},
		{"huge buffer", "127.0.0.1", 0, MaxBufSize + 1, false, "buffer size 1073741825"},
		{"negative port", "127.0.0.1", -1, 64, true, "port -1 is not in 0..65535"},
		{"big port", "127.0.0.1", 70000, 64, true, "port 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := initWith(tcpTransport, tc.ip, tc.port, tc.bufSize, tc.server)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("client ignores port", func(t *testing.T) {
		c, err := initWith(tcpTransport, "127.0.0.2", -7, 64, false)
		require.NoError(t, err)
		assert.Nil(t, c.Addr())
		require.NoError(t, c.Close())
	})
	forEachTransport(t, func(t *testing.T, tr transport) {
		a, err := initWith(tr, "127.0.0.1", 0, 64, true)
		require.NoError(t, err)
		defer a.Close()
		port := portOf(t, a.Addr())
		b, err := initWith(tr, "127.0.0.1", port, 64, true)
		require.Error(t, err, "a second listener on a taken port")
		assert.Nil(t, b)
		assert.Contains(t, err.Error(), fmt.Sprintf("listen on 127.0.0.1:%d", port))
	})
}

func TestSendRecvSizes(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		for _, bufSize := range []int{BufferSize, maxCoalesce + 1000} {
			s := newStar(t, tr, 1, bufSize)
			cl := s.clients[0]
			sizes := []int{0, 1, 63, 64, 65, 1000, bufSize - 1, bufSize}
			buf := make([]byte, bufSize)
			for _, n := range sizes {
				msg := pattern(n, byte(n))
				// client -> server
				got, err := cl.Send(0, msg)
				require.NoError(t, err)
				require.Equal(t, n, got)
				got, err = s.server.Recv(0, buf)
				require.NoError(t, err)
				require.Equal(t, n, got)
				require.True(t, bytes.Equal(msg, buf[:got]), "size %d", n)
				// server -> client
				_, err = s.server.Send(0, msg)
				require.NoError(t, err)
				got, err = cl.Recv(0, buf)
				require.NoError(t, err)
				require.True(t, bytes.Equal(msg, buf[:got]), "size %d", n)
			}
			s.close()
		}
	})
}

// Back-to-back messages keep their boundaries even when they arrive in one
// read.
func TestMessageBoundaries(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 1, BufferSize)
		for i := 1; i <= 50; i++ {
			_, err := s.clients[0].Send(0, pattern(i, byte(i)))
			require.NoError(t, err)
		}
		buf := make([]byte, BufferSize)
		for i := 1; i <= 50; i++ {
			n, err := s.server.Recv(0, buf)
			require.NoError(t, err)
			require.Equal(t, pattern(i, byte(i)), buf[:n])
		}
	})
}

func TestSendTooLong(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 1, 100)
		n, err := s.clients[0].Send(0, make([]byte, 101))
		assert.Equal(t, -1, n)
		require.ErrorIs(t, err, ErrMessageTooLong)
		assert.Contains(t, err.Error(), "101 bytes exceed the context's buffer size of 100 bytes")
		err = s.clients[0].Broadcast(make([]byte, 101))
		require.ErrorIs(t, err, ErrMessageTooLong)
		// The connection is untouched: the next message arrives whole.
		_, err = s.clients[0].Send(0, []byte("ok"))
		require.NoError(t, err)
		buf := make([]byte, 100)
		n, err = s.server.Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, "ok", string(buf[:n]))
	})
}

func TestRecvTooLongStaysQueued(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 1, BufferSize)
		msg := pattern(300, 7)
		_, err := s.clients[0].Send(0, msg)
		require.NoError(t, err)
		_, err = s.clients[0].Send(0, []byte("next"))
		require.NoError(t, err)

		small := make([]byte, 299)
		for i := 0; i < 2; i++ {
			n, err := s.server.Recv(0, small)
			assert.Equal(t, -1, n)
			require.ErrorIs(t, err, ErrMessageTooLong)
			assert.Contains(t, err.Error(), "the 300-byte message does not fit in 299 bytes (it stays queued")
		}
		buf := make([]byte, 300)
		n, err := s.server.Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, msg, buf[:n])
		n, err = s.server.Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, "next", string(buf[:n]))
	})
}

func TestPeerIndexErrors(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 2, BufferSize)
		buf := make([]byte, 8)
		for _, idx := range []int{-1, 2, 64, 1000} {
			_, err := s.server.Send(idx, buf)
			require.ErrorIs(t, err, ErrNoSuchPeer)
			assert.Contains(t, err.Error(), fmt.Sprintf("send to peer %d: no such peer (the context has 2 peers)", idx))
			_, err = s.server.Recv(idx, buf)
			require.ErrorIs(t, err, ErrNoSuchPeer)
			require.ErrorIs(t, s.server.DisconnectPeer(idx), ErrNoSuchPeer)
		}

		require.NoError(t, s.server.DisconnectPeer(0))
		err := s.server.DisconnectPeer(0)
		require.ErrorIs(t, err, ErrPeerDisconnected)
		assert.EqualError(t, err, "capi: disconnect peer 0: peer disconnected")
		_, err = s.server.Send(0, buf)
		require.ErrorIs(t, err, ErrPeerDisconnected)
		_, err = s.server.Recv(0, buf)
		require.ErrorIs(t, err, ErrPeerDisconnected)

		// Peer 1 is unaffected, and the disconnected client sees the end.
		_, err = s.server.Send(1, []byte("hi"))
		require.NoError(t, err)
		n, err := s.clients[1].Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, "hi", string(buf[:n]))
		_, err = s.clients[0].Recv(0, buf)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the peer closed the connection")

		require.NoError(t, s.server.Close())
		require.NoError(t, s.server.Close(), "Close twice is a no-op")
		_, err = s.server.Send(1, buf)
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.server.AcceptPeer()
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, s.server.Broadcast(buf), ErrClosed)
	})
}

func TestAcceptOnClient(t *testing.T) {
	c, err := initWith(tcpTransport, "127.0.0.2", 0, 64, false)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.AcceptPeer()
	require.ErrorIs(t, err, ErrNotServer)
	assert.EqualError(t, err, "capi: accept: not a server context")
}

func TestConnectErrors(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c, err := initWith(tr, "127.0.0.2", 0, 64, false)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.ConnectPeer("bogus", 1)
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = c.ConnectPeer("127.0.0.1", 0)
		require.ErrorIs(t, err, ErrInvalidArgument)
		// Nobody listens on this port: the error names the addresses.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		idx, err := c.ConnectPeer("127.0.0.1", port)
		assert.Equal(t, -1, idx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("connect to 127.0.0.1:%d from 127.0.0.2", port))
		// A failed connect takes no index.
		s := newStar(t, tr, 0, 64)
		idx, err = c.ConnectPeer("127.0.0.1", s.port)
		require.NoError(t, err)
		assert.Equal(t, 0, idx)
		_, err = s.server.AcceptPeer()
		require.NoError(t, err)
	})
}

// A client's connections come from its own IP.
func TestClientSourceAddress(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 2, 64)
		for i, want := range []string{"127.0.0.2", "127.0.0.3"} {
			p, err := s.server.peers.live("test", i)
			require.NoError(t, err)
			host, _, err := net.SplitHostPort(p.conn.RemoteAddr().String())
			require.NoError(t, err)
			assert.Equal(t, want, host)
		}
	})
}

func TestMaxPeers(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 0, 64)
		cl, err := initWith(tr, "127.0.0.2", 0, 64, false)
		require.NoError(t, err)
		defer cl.Close()
		for i := 0; i < MaxPeers; i++ {
			idx, err := cl.ConnectPeer("127.0.0.1", s.port)
			require.NoError(t, err)
			require.Equal(t, i, idx)
			idx, err = s.server.AcceptPeer()
			require.NoError(t, err)
			require.Equal(t, i, idx)
		}
		_, err = cl.ConnectPeer("127.0.0.1", s.port)
		require.ErrorIs(t, err, ErrTooManyPeers)
		assert.EqualError(t, err, "capi: connect: too many peers (MAX_PEERS is 64)")
		_, err = s.server.AcceptPeer()
		require.ErrorIs(t, err, ErrTooManyPeers)
		// Disconnecting does not free an index: indexes are never reused.
		require.NoError(t, cl.DisconnectPeer(3))
		_, err = cl.ConnectPeer("127.0.0.1", s.port)
		require.ErrorIs(t, err, ErrTooManyPeers)
		// Every other connection works.
		require.NoError(t, s.server.DisconnectPeer(3))
		require.NoError(t, s.server.Broadcast([]byte("x")))
		buf := make([]byte, 1)
		for i := 0; i < MaxPeers; i++ {
			if i == 3 {
				continue
			}
			n, err := cl.Recv(i, buf)
			require.NoError(t, err, "peer %d", i)
			require.Equal(t, 1, n)
		}
	})
}

func TestBroadcast(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 3, 64)
		require.NoError(t, s.server.Broadcast([]byte("to all")))
		buf := make([]byte, 64)
		for _, cl := range s.clients {
			n, err := cl.Recv(0, buf)
			require.NoError(t, err)
			assert.Equal(t, "to all", string(buf[:n]))
		}
		lone, err := initWith(tr, "127.0.0.2", 0, 64, false)
		require.NoError(t, err)
		defer lone.Close()
		err = lone.Broadcast([]byte("x"))
		require.ErrorIs(t, err, ErrNoPeers)
		assert.EqualError(t, err, "capi: broadcast: no connected peers")
	})
}

func TestSequentialAllToAll(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		const msgSize = 16
		s := newStar(t, tr, 3, 4*msgSize)
		for round := 0; round < 5; round++ {
			results := runAllToAll(t, s, msgSize, round, 4*msgSize)
			want := make([]byte, 0, 4*msgSize)
			for p := 0; p < 4; p++ {
				want = append(want, block(msgSize, p, round)...)
			}
			for p, got := range results {
				require.NoError(t, got.err, "participant %d", p)
				require.Equal(t, want, got.recv[:4*msgSize], "participant %d", p)
			}
		}
		// Without client 2 (peer 1), the others are participants 1 and 2.
		require.NoError(t, s.server.DisconnectPeer(1))
		three := &star{server: s.server, clients: []*Context{s.clients[0], s.clients[2]}}
		results := runAllToAll(t, three, msgSize, 9, 4*msgSize)
		want := append(append(block(msgSize, 0, 9), block(msgSize, 1, 9)...), block(msgSize, 2, 9)...)
		for p, got := range results {
			require.NoError(t, got.err, "participant %d", p)
			require.Equal(t, want, got.recv[:3*msgSize], "participant %d", p)
		}
	})
}

type result struct {
	recv []byte
	err  error
}

// runAllToAll runs one all-to-all; participant p sends block(msgSize, p, round).
func runAllToAll(t *testing.T, s *star, msgSize, round, recvLen int) []result {
	t.Helper()
	parts := append([]*Context{s.server}, s.clients...)
	results := make([]result, len(parts))
	var wg sync.WaitGroup
	for p, c := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recv := make([]byte, recvLen)
			err := c.SequentialAllToAll(block(msgSize, p, round), recv, msgSize)
			results[p] = result{recv, err}
		}()
	}
	wg.Wait()
	return results
}

func TestSequentialAllToAllErrors(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 2, 64)
		send, recv := make([]byte, 32), make([]byte, 64)
		err := s.server.SequentialAllToAll(send, recv, 0)
		require.ErrorIs(t, err, ErrInvalidArgument)
		err = s.server.SequentialAllToAll(send[:8], recv, 16)
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), "send buffer of 8 bytes is shorter than the message size 16")
		err = s.server.SequentialAllToAll(send, recv[:40], 16)
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), "receive buffer of 40 bytes, need 48")
		err = s.server.SequentialAllToAll(send, recv, 32) // 3*32 > bufSize 64
		require.ErrorIs(t, err, ErrMessageTooLong)
		assert.Contains(t, err.Error(), "3 participants of 32 bytes make 96 bytes, more than the buffer size of 64 bytes")

		lone, err := initWith(tr, "127.0.0.2", 0, 64, false)
		require.NoError(t, err)
		defer lone.Close()
		require.ErrorIs(t, lone.SequentialAllToAll(send, recv, 16), ErrNoPeers)

		// A client whose receive buffer is too small keeps the combined
		// message queued and gets it with a retry.
		var wg sync.WaitGroup
		var srvErr, cl1Err error
		wg.Add(2)
		go func() { defer wg.Done(); srvErr = s.server.SequentialAllToAll(block(16, 0, 0), make([]byte, 48), 16) }()
		go func() {
			defer wg.Done()
			cl1Err = s.clients[1].SequentialAllToAll(block(16, 2, 0), make([]byte, 48), 16)
		}()
		err = s.clients[0].SequentialAllToAll(block(16, 1, 0), make([]byte, 47), 16)
		require.ErrorIs(t, err, ErrMessageTooLong)
		wg.Wait()
		require.NoError(t, srvErr)
		require.NoError(t, cl1Err)
		buf := make([]byte, 48)
		n, err := s.clients[0].Recv(0, buf)
		require.NoError(t, err)
		require.Equal(t, 48, n)
		assert.Equal(t, block(16, 1, 0), buf[16:32])

		// A server that gets a block of the wrong size says so, and the
		// block stays queued.
		_, err = s.clients[0].Send(0, make([]byte, 5))
		require.NoError(t, err)
		err = s.server.SequentialAllToAll(send, recv, 16)
		require.ErrorIs(t, err, ErrProtocol)
		assert.Contains(t, err.Error(), "capi: all-to-all: participant 1: recv from peer 0: protocol error: got a 5-byte message, want a 16-byte all-to-all block (the message stays queued)")
		n, err = s.server.Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, 5, n)
	})
}

func TestCloseUnblocks(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 1, 64)
		errs := make(chan error, 2)
		go func() { _, err := s.server.AcceptPeer(); errs <- err }()
		go func() { _, err := s.server.Recv(0, make([]byte, 64)); errs <- err }()
		require.NoError(t, s.server.Close())
		for i := 0; i < 2; i++ {
			err := <-errs
			require.ErrorIs(t, err, ErrClosed)
		}
	})
}

// Garbage from the network is a clear error, never a huge allocation or a
// panic.
func TestProtocolError(t *testing.T) {
	s := newStar(t, tcpTransport, 0, 64)
	raw, err := net.Dial("tcp", s.server.Addr().String())
	require.NoError(t, err)
	defer raw.Close()
	idx, err := s.server.AcceptPeer()
	require.NoError(t, err)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 0xFFFFFFF0)
	_, err = raw.Write(hdr[:])
	require.NoError(t, err)
	_, err = s.server.Recv(idx, make([]byte, 64))
	require.ErrorIs(t, err, ErrProtocol)
	assert.True(t, strings.Contains(err.Error(), "message length 4294967280 exceeds 1073741824; peer disconnected"), err.Error())
	_, err = s.server.Recv(idx, make([]byte, 64))
	require.ErrorIs(t, err, ErrPeerDisconnected)
}

// Sending and receiving allocate nothing in steady state.
func TestSendRecvAllocs(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 1, BufferSize)
		msg, buf := make([]byte, 64), make([]byte, 64)
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := s.clients[0].Send(0, msg); err != nil {
				panic(err)
			}
			if _, err := s.server.Recv(0, buf); err != nil {
				panic(err)
			}
		})
		assert.Zero(t, allocs)
		send, recv := make([]byte, 16), make([]byte, 32)
		var wg sync.WaitGroup
		wg.Add(1)
		clientRecv := make([]byte, 32)
		go func() {
			defer wg.Done()
			for i := 0; i < 201; i++ {
				if err := s.clients[0].SequentialAllToAll(send, clientRecv, 16); err != nil {
					panic(err)
				}
			}
		}()
		allocs = testing.AllocsPerRun(200, func() {
			if err := s.server.SequentialAllToAll(send, recv, 16); err != nil {
				panic(err)
			}
		})
		wg.Wait()
		assert.Zero(t, allocs, "server all-to-all")
	})
}

func portOf(t *testing.T, a net.Addr) int {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return p
}

func pattern(n int, first byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = first + byte(i*7)
	}
	return b
}

// block is participant p's all-to-all block in a round.
func block(msgSize, p, round int) []byte {
	b := make([]byte, msgSize)
	copy(b, fmt.Sprintf("p%d r%d", p, round))
	return b
}

// Init's connections are rdma conns.
func TestDefaultTransportIsRDMA(t *testing.T) {
	s := newStar(t, defaultTransport, 1, 64)
	for _, c := range []*Context{s.server, s.clients[0]} {
		p, err := c.peers.live("test", 0)
		require.NoError(t, err)
		conn, ok := p.conn.(*rdma.Conn)
		require.True(t, ok, "a %T, not an *rdma.Conn", p.conn)
		assert.NotEmpty(t, conn.Provider())
		assert.Equal(t, "rdma", conn.LocalAddr().Network())
	}
}

// hostileServer accepts one capi client on raw TCP and answers its first
// all-to-all block with reply (raw bytes: a frame header and what follows),
// then closes the connection.
func hostileServer(t *testing.T, reply []byte) (port int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hdr [4]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[:]))); err != nil {
			return
		}
		_, _ = c.Write(reply)
	}()
	return portOf(t, ln.Addr())
}

// No server makes a client's all-to-all write past recv, nor leave part of
// a combined message in it.
func TestSequentialAllToAllHostileServer(t *testing.T) {
	const msgSize = 16
	run := func(t *testing.T, reply []byte) ([]byte, error) {
		port := hostileServer(t, reply)
		cl, err := initWith(tcpTransport, "127.0.0.2", 0, 4096, false)
		require.NoError(t, err)
		defer cl.Close()
		_, err = cl.ConnectPeer("127.0.0.1", port)
		require.NoError(t, err)
		// recv is the first 64 bytes of a larger array, whose tail must
		// stay as it was.
		mem := bytes.Repeat([]byte{0xee}, 128)
		err = cl.SequentialAllToAll(block(msgSize, 1, 0), mem[:64], msgSize)
		return mem, err
	}
	header := func(n int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

	t.Run("oversized", func(t *testing.T) {
		mem, err := run(t, append(header(4096), make([]byte, 4096)...))
		require.ErrorIs(t, err, ErrMessageTooLong)
		assert.EqualError(t, err, "capi: all-to-all: recv from peer 0: message too long: the combined message of 4096 bytes "+
			"(256 blocks of 16) does not fit in the receive buffer of 64 bytes (the message stays queued)")
		assert.Equal(t, bytes.Repeat([]byte{0xee}, 128), mem, "recv was written")
	})
	t.Run("one block over", func(t *testing.T) {
		mem, err := run(t, append(header(80), make([]byte, 80)...))
		require.ErrorIs(t, err, ErrMessageTooLong)
		assert.Equal(t, bytes.Repeat([]byte{0xee}, 128), mem, "recv was written")
	})
	t.Run("truncated", func(t *testing.T) {
		// The header promises 48 bytes; 20 arrive, then the server leaves:
		// what was written is zeroed, nothing else is touched.
		mem, err := run(t, append(header(48), bytes.Repeat([]byte{'s'}, 20)...))
		require.Error(t, err)
		assert.Equal(t, make([]byte, 48), mem[:48], "a partial result was left in recv")
		assert.Equal(t, bytes.Repeat([]byte{0xee}, 80), mem[48:], "bytes past the message were written")
	})
	t.Run("fits", func(t *testing.T) {
		mem, err := run(t, append(header(64), bytes.Repeat([]byte{'s'}, 64)...))
		require.NoError(t, err)
		assert.Equal(t, bytes.Repeat([]byte{'s'}, 64), mem[:64])
		assert.Equal(t, bytes.Repeat([]byte{0xee}, 64), mem[64:])
	})
}

// A peer whose connection fails is gone: its calls say so, the context's
// other peers go on (send, broadcast, all-to-all), and its index takes a
// new connection: AcceptPeerAt on the server, ReconnectPeer on a client.
func TestPeerGoneAndReplaced(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 3, 64)
		buf := make([]byte, 64)
		// Client 1 dies: its process would close every conn.
		require.NoError(t, s.clients[1].Close())
		_, err := s.server.Recv(1, buf)
		require.ErrorIs(t, err, ErrPeerGone)
		assert.Contains(t, err.Error(), "capi: recv from peer 1: the peer closed the connection")
		_, err = s.server.Send(1, buf)
		require.ErrorIs(t, err, ErrPeerGone)
		assert.Contains(t, err.Error(), "send to peer 1: peer gone (the peer closed the connection: EOF); reconnect or accept a replacement")
		// The others go on.
		require.NoError(t, s.server.Broadcast([]byte("still here")))
		for _, i := range []int{0, 2} {
			n, err := s.clients[i].Recv(0, buf)
			require.NoError(t, err)
			assert.Equal(t, "still here", string(buf[:n]))
		}
		three := &star{server: s.server, clients: []*Context{s.clients[0], s.clients[2]}}
		for p, r := range runAllToAll(t, three, 16, 1, 64) {
			require.NoError(t, r.err, "participant %d", p)
		}

		// A replacement for peer 1; an index in use or unknown is refused.
		require.ErrorIs(t, s.server.AcceptPeerAt(0), ErrPeerConnected)
		require.ErrorIs(t, s.server.AcceptPeerAt(3), ErrNoSuchPeer)
		repl, err := initWith(tr, "127.0.0.4", 0, 64, false)
		require.NoError(t, err)
		defer repl.Close()
		dialed := make(chan error, 1)
		go func() { _, err := repl.ConnectPeer("127.0.0.1", s.port); dialed <- err }()
		require.NoError(t, s.server.AcceptPeerAt(1))
		require.NoError(t, <-dialed)
		_, err = s.server.Send(1, []byte("welcome"))
		require.NoError(t, err)
		n, err := repl.Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, "welcome", string(buf[:n]))

		// The server drops client 2, which reconnects at its index 0.
		require.NoError(t, s.server.DisconnectPeer(2))
		_, err = s.clients[2].Recv(0, buf)
		require.ErrorIs(t, err, ErrPeerGone)
		require.ErrorIs(t, s.clients[2].ReconnectPeer(1, "127.0.0.1", s.port), ErrNoSuchPeer)
		accepted := make(chan error, 1)
		go func() { accepted <- s.server.AcceptPeerAt(2) }()
		require.NoError(t, s.clients[2].ReconnectPeer(0, "127.0.0.1", s.port))
		require.NoError(t, <-accepted)
		require.ErrorIs(t, s.clients[2].ReconnectPeer(0, "127.0.0.1", s.port), ErrPeerConnected)
		_, err = s.clients[2].Send(0, []byte("back"))
		require.NoError(t, err)
		n, err = s.server.Recv(2, buf)
		require.NoError(t, err)
		assert.Equal(t, "back", string(buf[:n]))

		// A client that dies before its all-to-all block is left out; the
		// others complete the exchange.
		require.NoError(t, s.clients[0].Close())
		rest := &star{server: s.server, clients: []*Context{repl, s.clients[2]}}
		results := runAllToAll(t, rest, 16, 2, 64)
		want := append(append(block(16, 0, 2), block(16, 1, 2)...), block(16, 2, 2)...)
		for p, r := range results {
			require.NoError(t, r.err, "participant %d", p)
			assert.Equal(t, want, r.recv[:48], "participant %d", p)
		}
		assert.Equal(t, 3, s.server.Participants())
		_, err = s.server.Send(0, buf)
		require.ErrorIs(t, err, ErrPeerGone)
	})
}
