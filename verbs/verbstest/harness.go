// Package verbstest is the conformance suite every verbs provider must
// pass: the behaviour of an RC NIC driven through the RDMA CM, including the
// limits and failure modes of real hardware. A provider's tests call Run.
package verbstest

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// Config says which provider to test and where.
type Config struct {
	// Provider is the registry name ("soft", "rdmacore").
	Provider string
	// IP is the local address listeners bind and clients dial (127.0.0.1
	// for soft; the RDMA device's address inside a Soft-RoCE VM). Never a
	// hard-coded address: the suite uses only this one.
	IP net.IP
	// SilencePeer, if set, makes the peer of the given connected QP stop
	// answering without closing the connection (a hung or partitioned
	// host). Tests that need it are skipped when it is nil.
	SilencePeer func(t *testing.T, peer verbs.QP)
	// TCPListener says the provider's listener is a TCP port at the RDMA
	// address (soft), which the suite then attacks with junk connections.
	TCPListener bool
	// PrepareDevice, if set, is called on each device a test opens for QPs
	// without the CM (PD.CreateQP), before the test reads its port and
	// GIDs: soft gives the device an address on IP there (soft.Bind); a
	// real device has its netdev's.
	PrepareDevice func(t testing.TB, ctx verbs.Context)
	// DmaBufUnsupported, when set, says why the provider's device cannot
	// register dma-bufs (rxe: no dma-buf support in its driver):
	// DmaBufMR then checks that RegDmaBufMR says so.
	DmaBufUnsupported string
	// Skip names subtests to skip on this provider, with the reason.
	Skip map[string]string
	// RecvInErrUnflushed, when set, says why the provider leaves a receive
	// posted to a QP already in ERR queued without a flush completion (rxe
	// on kernel 6.1; hardware and soft flush it): ModifyToErrFlushes then
	// leaves that one check out and runs the rest.
	RecvInErrUnflushed string
	// DeregReadStalls, when set, says why the provider leaves a READ whose
	// responder deregistered the region mid-response without a completion
	// (rxe on kernel 6.1). DeregFenceRead then flushes the READ by moving
	// the requester to ERR, and still checks that nothing the region held
	// after Dereg reached it.
	DeregReadStalls string
	// Timeout bounds each wait for an event or completion (default 10 s).
	Timeout time.Duration
}

type suite struct {
	cfg Config
	p   verbs.Provider
}

// Run runs the whole suite; each behaviour is a subtest.
func Run(t *testing.T, cfg Config) {
	p, err := verbs.Lookup(cfg.Provider)
	require.NoError(t, err)
	require.NotNil(t, cfg.IP, "Config.IP is required")
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	s := &suite{cfg: cfg, p: p}
	tests.Run(t, s, cfg.Skip)
}

var tests testsupport.Subtests[*suite]

func register(name string, fn func(t *testing.T, s *suite)) { tests.Add(name, fn) }

func (s *suite) addr(port int) *net.TCPAddr { return &net.TCPAddr{IP: s.cfg.IP, Port: port} }

// device opens the provider's first device.
func (s *suite) device(t testing.TB) verbs.Context {
	devs, err := s.p.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs, "provider %s has no device", s.cfg.Provider)
	ctx, err := s.p.Open(devs[0].Name)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ctx.Close()) })
	return ctx
}

// channel creates a CM event channel closed at cleanup.
func (s *suite) channel(t testing.TB) verbs.EventChannel {
	ch, err := s.p.CreateEventChannel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// expect waits for the next event on ch and checks its type.
func (s *suite) expect(t testing.TB, ch verbs.EventChannel, typ verbs.CMEventType) verbs.CMEvent {
	t.Helper()
	ev, err := ch.GetEvent(time.Now().Add(s.cfg.Timeout))
	require.NoError(t, err, "waiting for %v", typ)
	require.Equal(t, typ, ev.Type, "event status %d", ev.Status)
	return ev
}

// memory allocates registrable memory freed at cleanup.
func memory(t testing.TB, n int) *verbs.Memory {
	m, err := verbs.AllocMemory(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Free()) })
	return m
}

// endpoint is one side of a connection.
type endpoint struct {
	ch   verbs.EventChannel
	id   verbs.CMID
	pd   verbs.PD
	cc   verbs.CompChannel
	scq  verbs.CQ
	rcq  verbs.CQ
	qp   verbs.QP
	mem  *verbs.Memory
	mr   verbs.MR
	buf  []byte
	mu   sync.Mutex
	done bool
	// lentPD: pd is another endpoint's (pairOpts.serverPD), which
	// deallocates it.
	lentPD bool
}

// pairOpts shapes a connection.
type pairOpts struct {
	cap        verbs.QPCap
	cqe        int
	access     verbs.Access
	memSize    int
	connect    verbs.ConnParam
	accept     verbs.ConnParam
	ackTimeout int // the client's rdma_set_option ACK timeout exponent; 0: not set
	tos        int // both IDs' rdma_set_option type of service; 0: not set
	sharedCQ   bool
	signalAll  bool
	beforeConn func(client, server *endpoint) // e.g. pre-post receives
	serverPD   verbs.PD                       // the server's resources go in this PD; nil: a new one
}

func defaultOpts() pairOpts {
	return pairOpts{
		cap:     verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64},
		cqe:     256,
		access:  verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		memSize: 1 << 20,
		connect: verbs.ConnParam{ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7},
		accept:  verbs.ConnParam{ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7},
	}
}

// resources creates PD, channel, CQs, QP and an MR for an ID.
func (s *suite) resources(t testing.TB, e *endpoint, o *pairOpts) {
	ctx := e.id.Context()
	require.NotNil(t, ctx, "ID has no device")
	var err error
	if e.pd == nil {
		e.pd, err = ctx.AllocPD()
		require.NoError(t, err)
	} else {
		e.lentPD = true
	}
	e.cc, err = ctx.CreateCompChannel()
	require.NoError(t, err)
	e.scq, err = ctx.CreateCQ(o.cqe, e.cc)
	require.NoError(t, err)
	e.rcq = e.scq
	if !o.sharedCQ {
		e.rcq, err = ctx.CreateCQ(o.cqe, e.cc)
		require.NoError(t, err)
	}
	e.qp, err = e.id.CreateQP(e.pd, &verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: o.cap, SignalAll: o.signalAll})
	require.NoError(t, err)
	e.registerMemory(t, o)
}

// registerMemory gives e its buffer of o.memSize bytes, registered on its
// PD with o.access. Freed by release, after the MR over it (Free refuses
// before).
func (e *endpoint) registerMemory(t testing.TB, o *pairOpts) {
	var err error
	e.mem, err = verbs.AllocMemory(o.memSize)
	require.NoError(t, err)
	e.buf = e.mem.Bytes()[:o.memSize]
	e.mr, err = e.pd.RegMR(e.buf, o.access)
	require.NoError(t, err)
}

// release tears an endpoint down in the order the verbs require.
func (e *endpoint) release(t testing.TB) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return
	}
	e.done = true
	if e.qp != nil {
		require.NoError(t, e.qp.Destroy())
	}
	if e.id != nil {
		require.NoError(t, e.id.Destroy())
	}
	if e.mr != nil {
		require.NoError(t, e.mr.Dereg())
	}
	if e.mem != nil {
		require.NoError(t, e.mem.Free())
	}
	if e.rcq != nil && e.rcq != e.scq {
		require.NoError(t, e.rcq.Destroy())
	}
	if e.scq != nil {
		require.NoError(t, e.scq.Destroy())
	}
	if e.cc != nil {
		require.NoError(t, e.cc.Close())
	}
	if e.pd != nil && !e.lentPD {
		require.NoError(t, e.pd.Dealloc())
	}
}

// listener is a listening ID on cfg.IP with a free port.
func (s *suite) listener(t testing.TB) (verbs.EventChannel, verbs.CMID) {
	ch := s.channel(t)
	id, err := ch.CreateID()
	require.NoError(t, err)
	require.NoError(t, id.BindAddr(s.addr(0)))
	require.NoError(t, id.Listen(16))
	t.Cleanup(func() { _ = id.Destroy() })
	require.NotZero(t, id.LocalAddr().Port, "LocalAddr must report the chosen port")
	return ch, id
}

// dialer creates a client ID and resolves dst through ROUTE_RESOLVED; a
// type of service tos (not 0) is set before the route is resolved.
func (s *suite) dialer(t testing.TB, dst *net.TCPAddr, tos ...int) *endpoint {
	c := &endpoint{ch: s.channel(t)}
	var err error
	c.id, err = c.ch.CreateID()
	require.NoError(t, err)
	for _, v := range tos {
		require.NoError(t, c.id.SetTOS(v))
	}
	require.NoError(t, c.id.ResolveAddr(nil, dst, s.cfg.Timeout))
	s.expect(t, c.ch, verbs.EventAddrResolved)
	require.NoError(t, c.id.ResolveRoute(s.cfg.Timeout))
	s.expect(t, c.ch, verbs.EventRouteResolved)
	return c
}

// pair connects a client and a server endpoint.
func (s *suite) pair(t testing.TB, o pairOpts) (client, server *endpoint) {
	lch, lid := s.listener(t)
	return s.pairOn(t, lch, lid, o)
}

// pairOn connects a client endpoint to the listening ID lid, whose events
// come on lch, and returns it with the server endpoint of the connection.
func (s *suite) pairOn(t testing.TB, lch verbs.EventChannel, lid verbs.CMID, o pairOpts) (client, server *endpoint) {
	var tos []int
	if o.tos != 0 {
		tos = append(tos, o.tos)
	}
	client = s.dialer(t, lid.LocalAddr(), tos...)
	t.Cleanup(func() { client.release(t) })
	s.resources(t, client, &o)
	if o.ackTimeout != 0 {
		require.NoError(t, client.id.SetAckTimeout(o.ackTimeout))
	}
	require.NoError(t, client.id.Connect(&o.connect))
	req := s.expect(t, lch, verbs.EventConnectRequest)
	require.Equal(t, lid, req.Listen)
	server = &endpoint{ch: lch, id: req.ID, pd: o.serverPD}
	t.Cleanup(func() { server.release(t) })
	s.resources(t, server, &o)
	if o.beforeConn != nil {
		o.beforeConn(client, server)
	}
	if o.tos != 0 {
		require.NoError(t, server.id.SetTOS(o.tos))
	}
	require.NoError(t, server.id.Accept(&o.accept))
	s.expect(t, client.ch, verbs.EventEstablished)
	s.expect(t, lch, verbs.EventEstablished)
	return client, server
}

// poll waits for n completions on cq, failing after the suite's timeout.
func (s *suite) poll(t testing.TB, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	wc := make([]verbs.WC, n)
	deadline := time.Now().Add(s.cfg.Timeout)
	for len(out) < n {
		k, err := cq.Poll(wc[:n-len(out)])
		require.NoError(t, err)
		out = append(out, wc[:k]...)
		if k == 0 {
			require.True(t, time.Now().Before(deadline), "timed out with %d of %d completions: %+v", len(out), n, out)
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

// pollOne waits for one completion and checks its status.
func (s *suite) pollOne(t testing.TB, cq verbs.CQ, status verbs.WCStatus) verbs.WC {
	t.Helper()
	wc := s.poll(t, cq, 1)[0]
	require.Equal(t, status, wc.Status, "completion %+v: %v", wc, wc.Status)
	return wc
}

// quiet checks that no completion arrives on cq for d.
func quiet(t testing.TB, cq verbs.CQ, d time.Duration) {
	t.Helper()
	wc := make([]verbs.WC, 4)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		n, err := cq.Poll(wc)
		require.NoError(t, err)
		require.Zero(t, n, "unexpected completion %+v", wc[:n])
		time.Sleep(time.Millisecond)
	}
}

func postRecv(t testing.TB, e *endpoint, wrid uint64, off, n int) {
	t.Helper()
	require.NoError(t, e.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[off:off+n])}}}))
}

func postSend(t testing.TB, e *endpoint, wr verbs.SendWR) {
	t.Helper()
	require.NoError(t, e.qp.PostSend([]verbs.SendWR{wr}))
}

// closeUnblocks checks that close, called while wait is blocked, makes wait
// return verbs.ErrClosed.
func (s *suite) closeUnblocks(t testing.TB, wait, close func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- wait() }()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, verbs.ErrClosed)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("Close did not unblock the wait")
	}
}

func isDeadline(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
