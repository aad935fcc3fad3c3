package verbstest

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("ConnectAcceptDisconnect", testConnectAcceptDisconnect)
	register("TypeOfService", testTypeOfService)
}

func testConnectAcceptDisconnect(t *testing.T, s *suite) {
	o := defaultOpts()
	o.connect.PrivateData = []byte("hello from the client")
	o.accept.PrivateData = []byte("welcome")
	lch, lid := s.listener(t)
	c := s.dialer(t, lid.LocalAddr())
	t.Cleanup(func() { c.release(t) })
	s.resources(t, c, &o)
	require.NoError(t, c.id.Connect(&o.connect))
	req := s.expect(t, lch, verbs.EventConnectRequest)
	requirePadded(t, o.connect.PrivateData, req.Param.PrivateData, verbs.MaxPrivateDataConnect)
	sv := &endpoint{ch: lch, id: req.ID}
	t.Cleanup(func() { sv.release(t) })
	s.resources(t, sv, &o)
	require.NoError(t, sv.id.Accept(&o.accept))
	est := s.expect(t, c.ch, verbs.EventEstablished)
	require.Equal(t, c.id, est.ID)
	requirePadded(t, o.accept.PrivateData, est.Param.PrivateData, verbs.MaxPrivateDataAccept)
	est = s.expect(t, lch, verbs.EventEstablished)
	require.Equal(t, sv.id, est.ID)

	require.Equal(t, lid.LocalAddr().Port, c.id.RemoteAddr().Port)
	require.True(t, c.id.RemoteAddr().IP.Equal(s.cfg.IP))
	a, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSRTS, a.State)
	b, err := sv.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSRTS, b.State)
	require.Equal(t, sv.qp.Num(), a.DestQPNum)
	require.Equal(t, c.qp.Num(), b.DestQPNum)

	postRecv(t, sv, 1, 0, 64)
	postRecv(t, c, 2, 0, 64)
	require.NoError(t, c.id.Disconnect())
	s.expect(t, c.ch, verbs.EventDisconnected)
	s.expect(t, lch, verbs.EventDisconnected)
	// Both QPs are in ERR and their outstanding receives flushed.
	wc := s.pollOne(t, sv.rcq, verbs.WCWRFlushErr)
	require.Equal(t, uint64(1), wc.WRID)
	wc = s.pollOne(t, c.rcq, verbs.WCWRFlushErr)
	require.Equal(t, uint64(2), wc.WRID)
	a, err = c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)
}

func init() {
	register("PrivateDataLimits", testPrivateDataLimits)
	register("Reject", testReject)
	register("ConnectRefused", testConnectRefused)
	register("ConnectTimeout", testConnectTimeout)
	register("ResolveErrors", testResolveErrors)
	register("EventChannel", testEventChannel)
	register("Migrate", testMigrate)
	register("PeerGone", testPeerGone)
	register("DisconnectFlushesSends", testDisconnectFlushesSends)
	register("ManyConnections", testManyConnections)
}

// requirePadded checks private data as the kernel delivers it: what the
// peer sent, zero-padded to the whole field of the CM message (limit bytes),
// since the IB CM carries no length.
func requirePadded(t *testing.T, sent, got []byte, limit int) {
	t.Helper()
	require.Len(t, got, limit, "private data is padded to the CM message's field")
	require.Equal(t, sent, got[:len(sent)])
	require.Equal(t, make([]byte, limit-len(sent)), got[len(sent):], "padding is zeros")
}

func bytesOf(n int, first byte) []byte {
	b := make([]byte, n)
	fill(b, first)
	return b
}

func testPrivateDataLimits(t *testing.T, s *suite) {
	lch, lid := s.listener(t)
	o := defaultOpts()
	c := s.dialer(t, lid.LocalAddr())
	t.Cleanup(func() { c.release(t) })
	s.resources(t, c, &o)
	p := o.connect
	p.PrivateData = bytesOf(verbs.MaxPrivateDataConnect+1, 1)
	require.True(t, isErrno(c.id.Connect(&p), syscall.EINVAL), "57 bytes on connect")
	p.PrivateData = bytesOf(verbs.MaxPrivateDataConnect, 1)
	require.NoError(t, c.id.Connect(&p))
	req := s.expect(t, lch, verbs.EventConnectRequest)
	requirePadded(t, p.PrivateData, req.Param.PrivateData, verbs.MaxPrivateDataConnect)
	sv := &endpoint{ch: lch, id: req.ID}
	t.Cleanup(func() { sv.release(t) })
	s.resources(t, sv, &o)
	a := o.accept
	a.PrivateData = bytesOf(verbs.MaxPrivateDataAccept+1, 2)
	require.True(t, isErrno(sv.id.Accept(&a), syscall.EINVAL), "197 bytes on accept")
	require.True(t, isErrno(sv.id.Reject(bytesOf(verbs.MaxPrivateDataReject+1, 3)), syscall.EINVAL), "149 bytes on reject")
	a.PrivateData = bytesOf(verbs.MaxPrivateDataAccept, 2)
	require.NoError(t, sv.id.Accept(&a))
	est := s.expect(t, c.ch, verbs.EventEstablished)
	requirePadded(t, a.PrivateData, est.Param.PrivateData, verbs.MaxPrivateDataAccept)
	s.expect(t, lch, verbs.EventEstablished)
}

func testReject(t *testing.T, s *suite) {
	lch, lid := s.listener(t)
	o := defaultOpts()
	c := s.dialer(t, lid.LocalAddr())
	t.Cleanup(func() { c.release(t) })
	s.resources(t, c, &o)
	require.NoError(t, c.id.Connect(&o.connect))
	req := s.expect(t, lch, verbs.EventConnectRequest)
	why := bytesOf(verbs.MaxPrivateDataReject-20, 9)
	require.NoError(t, req.ID.Reject(why))
	ev := s.expect(t, c.ch, verbs.EventRejected)
	require.Equal(t, verbs.RejectStatusConsumer, ev.Status)
	requirePadded(t, why, ev.Param.PrivateData, verbs.MaxPrivateDataReject)
	require.NoError(t, req.ID.Destroy())
	// The listener keeps working.
	c2 := s.dialer(t, lid.LocalAddr())
	t.Cleanup(func() { c2.release(t) })
	s.resources(t, c2, &o)
	require.NoError(t, c2.id.Connect(&o.connect))
	req = s.expect(t, lch, verbs.EventConnectRequest)
	sv := &endpoint{ch: lch, id: req.ID}
	t.Cleanup(func() { sv.release(t) })
	s.resources(t, sv, &o)
	require.NoError(t, sv.id.Accept(&o.accept))
	s.expect(t, c2.ch, verbs.EventEstablished)
}

func testConnectRefused(t *testing.T, s *suite) {
	// A port that was just free: listen, note it, stop listening.
	ch := s.channel(t)
	l, err := ch.CreateID()
	require.NoError(t, err)
	require.NoError(t, l.BindAddr(s.addr(0)))
	require.NoError(t, l.Listen(1))
	dst := l.LocalAddr()
	require.NoError(t, l.Destroy())
	o := defaultOpts()
	c := s.dialer(t, dst)
	t.Cleanup(func() { c.release(t) })
	s.resources(t, c, &o)
	require.NoError(t, c.id.Connect(&o.connect))
	ev := s.expect(t, c.ch, verbs.EventRejected)
	require.Equal(t, verbs.RejectStatusNoListener, ev.Status)
	// The CM's REJ carries the private data field, here all zeros.
	requirePadded(t, []byte{}, ev.Param.PrivateData, verbs.MaxPrivateDataReject)
}

func testConnectTimeout(t *testing.T, s *suite) {
	// A listener that holds the request unanswered: as with the kernel's
	// RDMA CM (which answers the request with an MRA, so that the
	// connecting side waits for the consumer's answer for many minutes),
	// the connect reports nothing, well past the resolve timeouts; once
	// the listener destroys the request, it is rejected (a consumer reject).
	lch, lid := s.listener(t)
	o := defaultOpts()
	c := &endpoint{ch: s.channel(t)}
	var err error
	c.id, err = c.ch.CreateID()
	require.NoError(t, err)
	t.Cleanup(func() { c.release(t) })
	require.NoError(t, c.id.ResolveAddr(nil, lid.LocalAddr(), 300*time.Millisecond))
	s.expect(t, c.ch, verbs.EventAddrResolved)
	require.NoError(t, c.id.ResolveRoute(300*time.Millisecond))
	s.expect(t, c.ch, verbs.EventRouteResolved)
	s.resources(t, c, &o)
	require.NoError(t, c.id.Connect(&o.connect))
	req := s.expect(t, lch, verbs.EventConnectRequest)
	ev, err := c.ch.GetEvent(time.Now().Add(3 * time.Second))
	require.True(t, isDeadline(err), "no event while the listener holds the request: got %v (status %d), %v", ev.Type, ev.Status, err)
	require.NoError(t, req.ID.Destroy())
	ev = s.expect(t, c.ch, verbs.EventRejected)
	require.Equal(t, verbs.RejectStatusConsumer, ev.Status)
}

func testResolveErrors(t *testing.T, s *suite) {
	ch := s.channel(t)
	id, err := ch.CreateID()
	require.NoError(t, err)
	defer func() { require.NoError(t, id.Destroy()) }()
	require.Error(t, id.ResolveRoute(time.Second), "route before address")
	require.Error(t, id.Connect(&verbs.ConnParam{}), "connect before route")
	require.Error(t, id.ResolveAddr(nil, nil, time.Second))
	// The wildcard address is this host: it resolves (to the local device).
	require.NoError(t, id.ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4zero, Port: 1}, time.Second))
	s.expect(t, ch, verbs.EventAddrResolved)
	id2, err := ch.CreateID()
	require.NoError(t, err)
	defer func() { require.NoError(t, id2.Destroy()) }()
	if err := id2.ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4(224, 0, 0, 1), Port: 1}, time.Second); err == nil {
		s.expect(t, ch, verbs.EventAddrError)
	}
	id3, err := ch.CreateID()
	require.NoError(t, err)
	defer func() { require.NoError(t, id3.Destroy()) }()
	require.Error(t, id3.BindAddr(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}), "binding an address that is not ours (TEST-NET-1, never contacted)")
	// Listening on an unbound ID (the failed bind left it unbound) binds it
	// to the wildcard address and a free port, as rdma_listen does.
	require.NoError(t, id3.Listen(1))
	la := id3.LocalAddr()
	require.NotNil(t, la)
	require.True(t, la.IP.IsUnspecified(), "bound to %v", la)
	require.NotZero(t, la.Port)
}

func testEventChannel(t *testing.T, s *suite) {
	ch, err := s.p.CreateEventChannel()
	require.NoError(t, err)
	start := time.Now()
	_, err = ch.GetEvent(start.Add(30 * time.Millisecond))
	require.True(t, isDeadline(err), "deadline: %v", err)
	require.GreaterOrEqual(t, time.Since(start), 25*time.Millisecond)
	_, err = ch.GetEvent(time.Now().Add(-time.Second))
	require.True(t, isDeadline(err), "past deadline: %v", err)
	s.closeUnblocks(t, func() error {
		_, err := ch.GetEvent(time.Time{})
		return err
	}, ch.Close)
	_, err = ch.CreateID()
	require.Error(t, err, "CreateID on a closed channel")
}

func testMigrate(t *testing.T, s *suite) {
	ch1, ch2 := s.channel(t), s.channel(t)
	_, lid := s.listener(t)
	id, err := ch1.CreateID()
	require.NoError(t, err)
	defer func() { require.NoError(t, id.Destroy()) }()
	require.NoError(t, id.Migrate(ch2))
	require.NoError(t, id.ResolveAddr(nil, lid.LocalAddr(), s.cfg.Timeout))
	ev := s.expect(t, ch2, verbs.EventAddrResolved)
	require.Equal(t, id, ev.ID)
	_, err = ch1.GetEvent(time.Now().Add(20 * time.Millisecond))
	require.True(t, isDeadline(err), "the old channel gets nothing: %v", err)
}

func testPeerGone(t *testing.T, s *suite) {
	// The peer's resources vanish without a disconnect (a killed process
	// releases them the same way): the survivor sees DISCONNECTED and its
	// outstanding WRs flush.
	c, sv := s.pair(t, defaultOpts())
	postRecv(t, c, 1, 0, 64)
	sv.release(t)
	s.expect(t, c.ch, verbs.EventDisconnected)
	require.Equal(t, uint64(1), s.pollOne(t, c.rcq, verbs.WCWRFlushErr).WRID)
	a, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)
}

func testDisconnectFlushesSends(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	// Outstanding (RNR-retried) sends flush when the peer disconnects.
	for i := 0; i < 3; i++ {
		postSend(t, c, verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	}
	quiet(t, c.scq, 10e6)
	require.NoError(t, sv.id.Disconnect())
	s.expect(t, sv.ch, verbs.EventDisconnected)
	s.expect(t, c.ch, verbs.EventDisconnected)
	for i, wc := range s.poll(t, c.scq, 3) {
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
		require.Equal(t, uint64(i), wc.WRID)
	}
	require.NoError(t, sv.id.Disconnect(), "a second disconnect is harmless")
}

func testManyConnections(t *testing.T, s *suite) {
	lch, lid := s.listener(t)
	o := defaultOpts()
	o.memSize = 1 << 16
	const n = 8
	clients := make([]*endpoint, n)
	for i := range clients {
		c := s.dialer(t, lid.LocalAddr())
		t.Cleanup(func() { c.release(t) })
		s.resources(t, c, &o)
		clients[i] = c
		require.NoError(t, c.id.Connect(&o.connect))
	}
	// Requests and the ESTABLISHED of accepted ones interleave on the
	// listener's channel.
	servers := map[verbs.CMID]*endpoint{}
	for est := 0; est < n; {
		ev, err := lch.GetEvent(time.Now().Add(s.cfg.Timeout))
		require.NoError(t, err)
		switch ev.Type {
		case verbs.EventConnectRequest:
			sv := &endpoint{ch: lch, id: ev.ID}
			t.Cleanup(func() { sv.release(t) })
			s.resources(t, sv, &o)
			servers[ev.ID] = sv
			postRecv(t, sv, 1, 0, 64)
			require.NoError(t, sv.id.Accept(&o.accept))
		case verbs.EventEstablished:
			_, ok := servers[ev.ID]
			require.True(t, ok, "ESTABLISHED for an ID we did not accept")
			est++
		default:
			t.Fatalf("unexpected %v", ev.Type)
		}
	}
	for _, c := range clients {
		s.expect(t, c.ch, verbs.EventEstablished)
	}
	for i, c := range clients {
		c.buf[0] = byte(i)
		postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:1])}})
		s.pollOne(t, c.scq, verbs.WCSuccess)
	}
	seen := map[byte]bool{}
	for _, sv := range servers {
		s.pollOne(t, sv.rcq, verbs.WCSuccess)
		seen[sv.buf[0]] = true
	}
	require.Len(t, seen, n)
}

// rdma_set_option(TOS) before the route is resolved reaches the QP: its
// traffic class, as Query reports it (a device's address vector; soft's
// socket, read back). Out of range is EINVAL; unset is 0.
func testTypeOfService(t *testing.T, s *suite) {
	o := defaultOpts()
	o.tos = 0xb8 // DSCP EF
	c, _ := s.pair(t, o)
	a, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, 0xb8, a.TrafficClass, "the QP's traffic class after rdma_set_option(TOS)")

	plain, _ := s.pair(t, defaultOpts())
	a, err = plain.qp.Query()
	require.NoError(t, err)
	require.Equal(t, 0, a.TrafficClass, "no TOS set")

	require.ErrorIs(t, c.id.SetTOS(256), syscall.EINVAL)
	require.ErrorIs(t, c.id.SetTOS(-1), syscall.EINVAL)
}
