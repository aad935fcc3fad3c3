package soft

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// The active side opens its TCP connection at ResolveRoute (connect.go):
// Connect uses it, dials again when it has closed meanwhile, and an ID
// destroyed before Connect leaves nothing behind.

// routedClient resolves the address and the route of lid from a new ID.
func routedClient(t *testing.T, lid *cmID) (*eventChannel, *cmID) {
	t.Helper()
	return routedTo(t, nil, lid.LocalAddr())
}

// routedTo resolves the address (from src, nil for the route's) and the
// route of dst from a new ID.
func routedTo(t *testing.T, src, dst *net.TCPAddr) (*eventChannel, *cmID) {
	t.Helper()
	ch := newEventChannel()
	id := newCMID(ch)
	t.Cleanup(func() { ch.Close() })
	require.NoError(t, id.ResolveAddr(src, dst, 5*time.Second))
	getEvent(t, ch, verbs.EventAddrResolved)
	require.NoError(t, id.ResolveRoute(5*time.Second))
	getEvent(t, ch, verbs.EventRouteResolved)
	return ch, id
}

// connectOn gives id a QP and connects it.
func connectOn(t *testing.T, id *cmID) verbs.QP {
	t.Helper()
	qp, _ := qpOn(t, id)
	require.NoError(t, id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	return qp
}

// stageOf is the stage of id's connection attempt.
func stageOf(id *cmID) activeStage {
	id.mu.Lock()
	h := id.active
	id.mu.Unlock()
	if h == nil {
		return -1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stage
}

// connectAndAccept connects id to the listener on lch and waits until
// both ends are established; it returns the active and passive sockets.
func connectAndAccept(t *testing.T, ch, lch *eventChannel, id *cmID) (active, passive *net.TCPConn) {
	t.Helper()
	aq := connectOn(t, id).(*qp)
	req := getEvent(t, lch, verbs.EventConnectRequest)
	pq, _ := acceptOn(t, req.ID)
	getEvent(t, ch, verbs.EventEstablished)
	getEvent(t, lch, verbs.EventEstablished)
	sock := func(q *qp) *net.TCPConn {
		q.mu.Lock()
		defer q.mu.Unlock()
		require.NotNil(t, q.sock)
		return q.sock
	}
	return sock(aq), sock(pq.(*qp))
}

func TestConnectUsesTheRouteConnection(t *testing.T) {
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 1))
	ch, id := routedClient(t, lid)
	require.True(t, eventually(func() bool { return stageOf(id) == activeReady }),
		"the TCP connection opens at ResolveRoute")
	id.mu.Lock()
	early := id.active.c
	id.mu.Unlock()
	sock, _ := connectAndAccept(t, ch, lch, id)
	assert.Same(t, early, sock, "Connect carries the connection on the socket opened at ResolveRoute")
}

// A listener closes a TCP connection that sends no request within its
// handshake timeout; Connect after that dials again.
func TestConnectAfterTheRouteConnectionClosed(t *testing.T) {
	old := SetHandshakeTimeout(50 * time.Millisecond)
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 1))
	SetHandshakeTimeout(old)
	ch, id := routedClient(t, lid)
	require.True(t, eventually(func() bool { return stageOf(id) == activeGone }),
		"the listener closes the silent connection")
	id.mu.Lock()
	closed := id.active
	id.mu.Unlock()
	sock, _ := connectAndAccept(t, ch, lch, id)
	id.mu.Lock()
	assert.NotSame(t, closed, id.active, "Connect started a new attempt")
	id.mu.Unlock()
	assert.NotSame(t, closed.c, sock)
}

// An ID destroyed between ResolveRoute and Connect closes its connection:
// the listener reports nothing, and no descriptor is left.
func TestDestroyBeforeConnectClosesTheRouteConnection(t *testing.T) {
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 1))
	base := openFDs(t)
	ch, id := routedClient(t, lid)
	require.True(t, eventually(func() bool { return stageOf(id) == activeReady }))
	require.NoError(t, id.Destroy())
	require.NoError(t, ch.Close())
	_, err := lch.GetEvent(time.Now().Add(100 * time.Millisecond))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the listener reports no request")
	// Well within the listener's handshake timeout (5 s): the close, not
	// the listener's timer, ends the connection on both sides.
	closed := false
	for end := time.Now().Add(2 * time.Second); !closed && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		closed = openFDs(t) <= base
	}
	assert.True(t, closed, "descriptors: %d, before %d", openFDs(t), base)
}

// A soft connection's sockets have Go's TCP keepalive off (the QP's
// watchdog and the consumer's heartbeat watch liveness), and the active
// side's port is picked at connect, for its whole 4-tuple: the socket is
// not bound when no source address was given, and bound to the address
// alone (IP_BIND_ADDRESS_NO_PORT) when one was.
func TestConnectionSocketOptions(t *testing.T) {
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 1))
	ch, id := routedClient(t, lid)
	active, passive := connectAndAccept(t, ch, lch, id)
	intOpt := func(c *net.TCPConn, level, name int) int {
		rc, err := c.SyscallConn()
		require.NoError(t, err)
		var v int
		var serr error
		require.NoError(t, rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), level, name) }))
		require.NoError(t, serr)
		return v
	}
	assert.Equal(t, 0, intOpt(active, unix.SOL_SOCKET, unix.SO_KEEPALIVE), "active side's keepalive")
	assert.Equal(t, 0, intOpt(active, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT), "not bound")
	assert.Equal(t, 1, intOpt(active, unix.IPPROTO_TCP, unix.TCP_NODELAY))
	assert.Equal(t, 0, intOpt(passive, unix.SOL_SOCKET, unix.SO_KEEPALIVE), "passive side's keepalive")
	assert.Equal(t, 1, intOpt(passive, unix.IPPROTO_TCP, unix.TCP_NODELAY))

	// A source given: bound to it, the port picked at connect.
	src := net.IPv4(127, 0, 0, 74)
	bch, bid := routedTo(t, &net.TCPAddr{IP: src}, lid.LocalAddr())
	bound, _ := connectAndAccept(t, bch, lch, bid)
	assert.Equal(t, 1, intOpt(bound, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT))
	assert.True(t, bound.LocalAddr().(*net.TCPAddr).IP.Equal(src), "from %v", bound.LocalAddr())
	assert.True(t, bid.LocalAddr().IP.Equal(src), "ID's address %v", bid.LocalAddr())
}

// rawPassive is a listener that answers one REQ with a REP on TCP and
// hands over its side of the connection, to watch what the active side
// sends after the REP.
func rawPassive(t *testing.T, ip net.IP) (*net.TCPAddr, <-chan *tcpTransport) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	got := make(chan *tcpTransport, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		tr, err := newTCPTransport(c)
		if err != nil {
			c.Close()
			return
		}
		_ = tr.setReadDeadline(time.Now().Add(10 * time.Second))
		if m, err := readHandshake(tr); err != nil || m.typ != msgREQ {
			c.Close()
			return
		}
		rep, _ := (&hsMsg{typ: msgREP, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7, transports: transportTCP}).marshal()
		if _, err := c.Write(rep); err != nil {
			c.Close()
			return
		}
		got <- tr
	}()
	return ln.Addr().(*net.TCPAddr), got
}

// connectedTo connects a new ID with a QP to addr and waits for it to be
// established.
func connectedTo(t *testing.T, addr *net.TCPAddr) (*cmID, verbs.QP) {
	t.Helper()
	ch, id := routedTo(t, nil, addr)
	qp := connectOn(t, id)
	getEvent(t, ch, verbs.EventEstablished)
	return id, qp
}

// On a TCP connection the active side's RTU goes out with its first
// frames, in one write, so that the listener wakes once for both; with
// no frames it goes alone after rtuDelay, and it comes before a
// disconnect's frame.
func TestRTUGoesWithTheFirstFrames(t *testing.T) {
	take := func(got <-chan *tcpTransport) *tcpTransport {
		select {
		case tr := <-got:
			t.Cleanup(func() { tr.close() })
			return tr
		case <-time.After(10 * time.Second):
			t.Fatal("no connection reached the listener")
			return nil
		}
	}
	t.Run("with a send", func(t *testing.T) {
		prev := rtuDelay
		rtuDelay = time.Hour // nothing but a frame sends it
		defer func() { rtuDelay = prev }()
		addr, got := rawPassive(t, net.IPv4(127, 0, 0, 79))
		_, qp := connectedTo(t, addr)
		tr := take(got)
		require.NoError(t, tr.setReadDeadline(time.Now().Add(100*time.Millisecond)))
		_, err := readHandshake(tr)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the RTU waits for a frame")
		require.NoError(t, tr.setReadDeadline(time.Now().Add(10*time.Second)))
		require.NoError(t, qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpSend}}))
		m, err := readHandshake(tr)
		require.NoError(t, err)
		require.Equal(t, uint8(msgRTU), m.typ)
		require.True(t, tr.buffered(), "the frame came in the RTU's read")
		var h [hdrLen]byte
		require.NoError(t, tr.readHeader(&h))
		var f header
		require.NoError(t, f.decode(&h))
		require.Equal(t, uint8(frameSend), f.typ)
	})
	t.Run("alone", func(t *testing.T) {
		addr, got := rawPassive(t, net.IPv4(127, 0, 0, 80))
		connectedTo(t, addr)
		m, err := readHandshake(take(got))
		require.NoError(t, err)
		require.Equal(t, uint8(msgRTU), m.typ)
	})
	t.Run("before a disconnect", func(t *testing.T) {
		prev := rtuDelay
		rtuDelay = time.Hour
		defer func() { rtuDelay = prev }()
		addr, got := rawPassive(t, net.IPv4(127, 0, 0, 81))
		id, _ := connectedTo(t, addr)
		tr := take(got)
		require.NoError(t, id.Disconnect())
		m, err := readHandshake(tr)
		require.NoError(t, err)
		require.Equal(t, uint8(msgRTU), m.typ)
		var h [hdrLen]byte
		require.NoError(t, tr.readHeader(&h))
		var f header
		require.NoError(t, f.decode(&h))
		require.Equal(t, uint8(frameDisc), f.typ)
	})
}

// Connections to one listener resolve its route once; a connect that
// fails (nothing listens) forgets it, and one with no source given is not
// bound to the remembered one: its address is the connection's own.
func TestResolveAddrUsesTheRouteCache(t *testing.T) {
	n := countRouteLookups(t)
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 1))
	for range 3 {
		ch, id := routedClient(t, lid)
		connectAndAccept(t, ch, lch, id)
		require.True(t, id.LocalAddr().IP.Equal(net.IPv4(127, 0, 0, 1)), "local address %v", id.LocalAddr())
		require.NotZero(t, id.LocalAddr().Port, "the connection's own address")
	}
	require.Equal(t, int32(1), n.Load())

	// A destination nobody listens on: refused, and looked up again next time.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().(*net.TCPAddr)
	ln.Close()
	for want := int32(2); want <= 3; want++ {
		ch, id := routedTo(t, nil, dead)
		require.Equal(t, want, n.Load())
		qpOn(t, id)
		require.NoError(t, id.Connect(&verbs.ConnParam{}))
		getEvent(t, ch, verbs.EventRejected)
	}
}
