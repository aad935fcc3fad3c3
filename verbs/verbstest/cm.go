package verbstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("ConnectAcceptDisconnect", testConnectAcceptDisconnect)
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
	require.Equal(t, o.connect.PrivateData, req.Param.PrivateData[:len(o.connect.PrivateData)])
	sv := &endpoint{ch: lch, id: req.ID}
	t.Cleanup(func() { sv.release(t) })
	s.resources(t, sv, &o)
	require.NoError(t, sv.id.Accept(&o.accept))
	est := s.expect(t, c.ch, verbs.EventEstablished)
	require.Equal(t, c.id, est.ID)
	require.Equal(t, o.accept.PrivateData, est.Param.PrivateData[:len(o.accept.PrivateData)])
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
