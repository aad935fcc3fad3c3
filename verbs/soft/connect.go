package soft

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/hostaddr"
	"github.com/rdmanet/rdma/internal/phase"
	"github.com/rdmanet/rdma/verbs"
)

// The active side of the connection manager's handshake.
//
// ResolveRoute opens the TCP connection that will carry the connection
// (activeHandshake), so that the TCP handshake, and the listener's taking
// the connection, overlap what the consumer does between resolving the
// route and connecting: creating the QP, registering memory. Connect then
// writes the request from the caller's goroutine, and the goroutine that
// dialed, already waiting on the socket, reads the answer. On loopback the
// TCP connect took about 90 us of a 630 us dial-to-first-echo, and waking
// a goroutine started at Connect about 25 us more, before the request
// could leave.
//
// Nothing is sent before Connect: a route resolved and never connected
// costs the listener an accepted TCP connection that closes unused, which
// it already bears from any silent client. A TCP connection that fails or
// closes before Connect is not reported: Connect dials again.

// activeHandshake is one attempt to connect an ID: a TCP dial, the
// request, the answer.
type activeHandshake struct {
	id *cmID

	mu    sync.Mutex
	stage activeStage
	args  *connectArgs // set by Connect
	c     *net.TCPConn
	tr    *tcpTransport
	offer *shmOffer
	// tos is the type of service the socket was dialed with, when set.
	tos    int
	tosSet bool
}

type activeStage int

const (
	activeDialing activeStage = iota // the TCP connection is being opened
	activeReady                      // open, waiting for Connect
	activeSent                       // the request is written
	activeGone                       // the goroutine ended before Connect: dial again
)

// connectArgs is what Connect adds to an attempt.
type connectArgs struct {
	q        *qp
	req      hsMsg
	param    verbs.ConnParam
	deadline time.Time // for the TCP connection and the answer
	// The type of service asked for by Connect's time, when set.
	tos    int
	tosSet bool
}

// startActive starts an attempt for id, whose mutex the caller holds: the
// dial runs on a goroutine of the ID's. a is nil when the attempt starts
// before Connect.
func (id *cmID) startActive(a *connectArgs, deadline time.Time) *activeHandshake {
	h := &activeHandshake{id: id, args: a, tos: id.tos, tosSet: id.tosSet}
	id.active = h
	id.wg.Add(1)
	var local *net.TCPAddr
	if id.srcGiven {
		local = copyAddr(id.local)
	}
	go h.run(id.life, local, copyAddr(id.remote), deadline)
	return h
}

// connectTimeout is how long a connect may take to reach its listener.
func (id *cmID) connectTimeout() time.Duration {
	if id.timeout <= 0 {
		return defaultConnectTimeout
	}
	return id.timeout
}

func (id *cmID) Connect(param *verbs.ConnParam) error {
	const op = "rdma_connect"
	if param == nil {
		param = &verbs.ConnParam{}
	}
	if err := checkParam(op, param, verbs.MaxPrivateDataConnect); err != nil {
		return err
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	q, err := id.openingQP(op, idRouteResolved, "resolve the route first")
	if err != nil {
		return err
	}
	q.mu.Lock()
	if id.ackTimeoutSet {
		q.attr.Timeout = id.ackTimeout
	}
	req := hsMsg{typ: msgREQ, qpn: q.num, sqDepth: uint32(q.cap.MaxSendWR), rqDepth: uint32(q.cap.MaxRecvWR),
		respRes: uint8(param.ResponderResources), initDepth: uint8(param.InitiatorDepth),
		retry: uint8(param.RetryCount), rnrRetry: uint8(param.RNRRetryCount),
		transports: transportTCP | reqTakesMRA, delayedAcks: true, priv: append([]byte(nil), param.PrivateData...)}
	q.mu.Unlock()
	id.state = idConnecting
	a := &connectArgs{q: q, req: req, param: *param, deadline: time.Now().Add(id.connectTimeout()),
		tos: id.tos, tosSet: id.tosSet}
	if h := id.active; h != nil && h.attach(a) {
		return nil
	}
	id.startActive(a, a.deadline)
	return nil
}

// attach gives Connect's arguments to the attempt started at ResolveRoute
// and, if its TCP connection is open, writes the request from the
// caller's goroutine. It reports false when the attempt has ended, to be
// started again.
func (h *activeHandshake) attach(a *connectArgs) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.stage {
	case activeGone:
		return false
	case activeReady:
		h.args = a
		h.stage = activeSent
		if err := h.writeRequest(a); err != nil {
			// The goroutine waiting for the answer reads the closed
			// connection and reports it.
			h.c.Close()
		}
	default: // dialing: the goroutine writes the request once connected
		h.args = a
	}
	return true
}

// writeRequest writes the request, with the offer of shared memory when
// the peer is on this host, on the open connection. The attempt's fields
// are set and no longer change.
func (h *activeHandshake) writeRequest(a *connectArgs) error {
	if a.tosSet && (!h.tosSet || a.tos != h.tos) {
		// Set after the dial: it applies from now on.
		if err := setConnTOS(h.c, a.tos); err != nil {
			return err
		}
	}
	if h.offer != nil {
		a.req.transports |= transportShm
		a.req.ext = h.offer.extension()
	}
	setHandshakeDeadline(h.id.life, h.c, h.tr, a.deadline)
	b, _ := a.req.marshal()
	if _, err := h.c.Write(b); err != nil {
		return err
	}
	phase.Mark("soft connect: REQ sent")
	return nil
}

// setHandshakeDeadline sets the deadline of the handshake's reads and
// writes, unless ctx (the ID's life) has ended: then they end at once.
func setHandshakeDeadline(ctx context.Context, c *net.TCPConn, tr *tcpTransport, d time.Time) {
	_ = c.SetWriteDeadline(d)
	_ = tr.setReadDeadline(d)
	if ctx.Err() != nil {
		interruptHandshake(c, tr)
	}
}

// interruptHandshake ends the handshake's pending read and write.
func interruptHandshake(c *net.TCPConn, tr *tcpTransport) {
	_ = c.SetWriteDeadline(time.Unix(1, 0))
	_ = tr.setReadDeadline(time.Unix(1, 0))
}

// run opens the TCP connection and, once Connect has come, sends the
// request (unless Connect did) and takes the answer.
func (h *activeHandshake) run(ctx context.Context, local, remote *net.TCPAddr, deadline time.Time) {
	defer h.id.wg.Done()
	phase.Mark("soft connect: running")
	c, err := dialTCP(ctx, local, remote, deadline, h.tos, h.tosSet)
	var tr *tcpTransport
	var offer *shmOffer
	stop := func() bool { return true }
	if err == nil {
		phase.Mark("soft connect: TCP connected")
		// Offer shared memory when the peer is on this host (shm.go);
		// withdrawn unless the REP picks it.
		offer = newShmOffer(c, deadline)
		if tr, err = newTCPTransport(c); err != nil {
			offer.abort()
			c.Close()
		} else {
			// Destroy ends the handshake at once.
			stop = context.AfterFunc(ctx, func() { interruptHandshake(c, tr) })
			setHandshakeDeadline(ctx, c, tr, deadline)
		}
	}
	h.mu.Lock()
	a := h.args
	switch {
	case err == nil:
		h.c, h.tr, h.offer = c, tr, offer
		h.stage = activeReady
		if a != nil {
			h.stage = activeSent // Connect came while dialing
		}
	case a == nil:
		h.stage = activeGone
	}
	h.mu.Unlock()
	if err != nil {
		if local == nil {
			routes.forget(remote) // the next ResolveAddr looks again
		}
		if a != nil {
			h.id.dialFailed(err)
		}
		return // before Connect: Connect dials again
	}
	defer stop()
	defer offer.abort()
	if a != nil {
		err = h.writeRequest(a)
	}
	var m hsMsg
	if err == nil {
		m, err = readHandshake(tr)
	}
	h.mu.Lock()
	a = h.args
	if a == nil {
		h.stage = activeGone
	}
	h.mu.Unlock()
	if a == nil {
		// Closed by the listener or by Destroy, or a message before any
		// request: nothing to report.
		c.Close()
		return
	}
	h.id.finishConnect(a, c, tr, offer, m, err)
}

// rtuDelay is how long an RTU waits for the active side's first frames
// (connect.go's finishConnect) before it goes alone. A connection's first
// write usually follows its establishment at once; one that comes later
// finds the RTU sent, as it always was. The listener hands the connection
// out at the REP (rdma.Listener, as rsocket's accept) and waits twice its
// handshake timeout for the RTU.
var rtuDelay = time.Millisecond

// dialTCP opens the TCP connection to a listener, from local's address
// when local is not nil (the caller chose it) and else from the one the
// kernel's route picks at connect. Go's TCP keepalive is off, as on the
// listener's side: a soft connection's liveness is the QP's
// retransmission watchdog and the consumer's own (rdma.Conn's
// heartbeat), as on a NIC, and the four socket options it sets on each
// socket were a tenth of a connection's system calls.
func dialTCP(ctx context.Context, local, remote *net.TCPAddr, deadline time.Time, tos int, tosSet bool) (*net.TCPConn, error) {
	d := net.Dialer{KeepAlive: -1, Deadline: deadline}
	if local != nil || tosSet {
		d.Control = func(network, _ string, rc syscall.RawConn) error {
			if local != nil {
				if err := bindAddressOnly(rc); err != nil {
					return err
				}
			}
			if tosSet {
				// On the socket before it connects, so that the SYN
				// carries it.
				return setTOS(rc, network == "tcp6", tos)
			}
			return nil
		}
	}
	if local == nil {
		// Not DialTCP: it binds even a zero local address, to a port of
		// its own, which is what IP_BIND_ADDRESS_NO_PORT is there to avoid.
		c, err := d.DialContext(ctx, "tcp", remote.String())
		if err != nil {
			return nil, err
		}
		return c.(*net.TCPConn), nil
	}
	la, ok := netip.AddrFromSlice(local.IP)
	if !ok {
		return nil, &net.AddrError{Err: "bad local address", Addr: local.IP.String()}
	}
	return d.DialTCP(ctx, "tcp", netip.AddrPortFrom(la.Unmap(), 0), remote.AddrPort())
}

// connectFailed records a failed connect and reports it.
func (id *cmID) connectFailed(typ verbs.CMEventType, status int, param verbs.ConnParam) {
	id.mu.Lock()
	id.state = idDone
	id.mu.Unlock()
	id.event(typ, status, param)
}

// dialFailed reports a TCP connection that could not be opened.
func (id *cmID) dialFailed(err error) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		id.connectFailed(verbs.EventRejected, verbs.RejectStatusNoListener, verbs.ConnParam{PrivateData: padPrivateData(nil, verbs.MaxPrivateDataReject)})
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		id.connectFailed(verbs.EventUnreachable, -int(syscall.ETIMEDOUT), verbs.ConnParam{})
	default:
		id.connectFailed(verbs.EventUnreachable, -int(syscall.EHOSTUNREACH), verbs.ConnParam{})
	}
}

// finishConnect takes the listener's answer (m, or the error that ended
// the wait for it) and, if it accepts, starts the connection.
func (id *cmID) finishConnect(a *connectArgs, c *net.TCPConn, tr *tcpTransport, offer *shmOffer, m hsMsg, err error) {
	fail := func(err error) {
		c.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			id.connectFailed(verbs.EventUnreachable, -int(syscall.ETIMEDOUT), verbs.ConnParam{})
			return
		}
		id.connectFailed(verbs.EventConnectError, -int(syscall.ECONNRESET), verbs.ConnParam{})
	}
	if err == nil && m.typ == msgMRA {
		// The listener holds the request: wait for its answer, and give
		// the RTU that may follow it as long (the connect's deadline may
		// have passed by then).
		setHandshakeDeadline(id.life, c, tr, time.Now().Add(heldRequestTimeout))
		m, err = readHandshake(tr)
	}
	if err == nil && m.typ != msgREP && m.typ != msgREJ {
		err = errBadHandshake
	}
	if err != nil {
		fail(err)
		return
	}
	phase.Mark("soft connect: REP read")
	if m.typ == msgREJ {
		c.Close()
		id.connectFailed(verbs.EventRejected, verbs.RejectStatusConsumer, verbs.ConnParam{PrivateData: padPrivateData(m.priv, verbs.MaxPrivateDataReject)})
		return
	}
	var etr transport = tr
	switch {
	case m.transports == transportShm && offer != nil:
		st, err := offer.finish(c)
		if err != nil {
			fail(err)
			return
		}
		etr = st
	case m.transports == transportShmSwitch && offer != nil && offer.version == 4:
		// Frames start on TCP; the switch transport takes over after
		// the RTU.
	case m.transports != transportTCP:
		fail(errBadHandshake)
		return
	}
	if offer != nil {
		if m.transports == transportTCP {
			counters.shmDialRefused.Add(1)
		} else {
			counters.shmDialAccepted.Add(1)
		}
	}
	rtu, _ := (&hsMsg{typ: msgRTU}).marshal()
	// On a plain TCP connection the RTU goes with the first frames, so
	// that the listener's receiver wakes once for both; shared memory
	// carries frames elsewhere, and the switching transport writes on
	// the connection itself: there it goes now.
	deferRTU := m.transports == transportTCP
	if !deferRTU {
		if _, err := c.Write(rtu); err != nil {
			_ = etr.close()
			fail(err)
			return
		}
	}
	_ = c.SetWriteDeadline(time.Time{})
	_ = tr.setReadDeadline(time.Time{})
	if m.transports == transportShmSwitch {
		etr = offer.switching(tr)
	}
	q, param := a.q, a.param
	id.mu.Lock()
	if id.destroyed || id.qp != q {
		id.mu.Unlock()
		_ = etr.close()
		c.Close()
		return
	}
	id.connectedLocked()
	id.local = copyAddr(c.LocalAddr().(*net.TCPAddr))
	id.mu.Unlock()
	q.mu.Lock()
	q.sock = c
	q.mu.Unlock()
	q.start(etr, &m, id.engineDown)
	q.mu.Lock()
	if deferRTU {
		q.preamble = rtu
		q.preambleTimer = time.AfterFunc(rtuDelay, q.sendPreamble)
	}
	q.attr.RetryCnt = int(a.req.retry)
	q.attr.RNRRetry = int(m.rnrRetry)
	if param.InitiatorDepth > 0 {
		q.attr.MaxRdAtomic = min(param.InitiatorDepth, max(int(m.respRes), 1))
	}
	if param.ResponderResources > 0 {
		q.attr.MaxDestRdAtomic = param.ResponderResources
	}
	if q.state == verbs.QPSInit {
		q.setState(verbs.QPSRTR)
		q.setState(verbs.QPSRTS)
	}
	q.mu.Unlock()
	q.startReceiver(nil)
	phase.Mark("soft connect: established")
	if testHookEstablished != nil {
		testHookEstablished()
	}
	id.established(verbs.ConnParam{
		PrivateData:        padPrivateData(m.priv, verbs.MaxPrivateDataAccept),
		ResponderResources: int(m.respRes),
		InitiatorDepth:     int(m.initDepth),
		RetryCount:         int(m.retry),
		RNRRetryCount:      int(m.rnrRetry),
	})
}

// testHookEstablished, when set, runs as a connecting ID is about to
// report ESTABLISHED, its engine already running.
var testHookEstablished func()

func (id *cmID) ResolveAddr(src, dst *net.TCPAddr, timeout time.Duration) error {
	const op = "rdma_resolve_addr"
	if dst == nil || dst.IP == nil {
		return verbs.Errorf(op, syscall.EINVAL, "no destination address")
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state != idIdle && id.state != idBound {
		return verbs.Errorf(op, syscall.EINVAL, "ID is not idle")
	}
	var srcIP net.IP
	if src != nil && src.IP != nil {
		srcIP = src.IP
	} else if id.local != nil && !id.local.IP.IsUnspecified() {
		srcIP = id.local.IP
	}
	ch := id.ch
	fail := func(errno syscall.Errno) error {
		ch.push(verbs.CMEvent{Type: verbs.EventAddrError, ID: id, Status: -int(errno)})
		return nil
	}
	// The wildcard destination is this host (the kernel's
	// cma_resolve_loopback); the route lookup below maps it to loopback.
	if dst.IP.IsMulticast() || dst.IP.Equal(net.IPv4bcast) || dst.Port <= 0 || dst.Port > 65535 {
		return fail(syscall.EADDRNOTAVAIL)
	}
	if srcIP != nil && !hostaddr.Local(srcIP) {
		return fail(syscall.EADDRNOTAVAIL)
	}
	id.srcGiven = srcIP != nil
	if srcIP == nil {
		// Ask the kernel for the route's source address (route.go).
		ip, err := routes.source(dst, time.Now())
		if err != nil {
			return fail(syscall.EHOSTUNREACH)
		}
		srcIP = ip
	}
	id.local = &net.TCPAddr{IP: append(net.IP(nil), srcIP...)}
	id.remote = copyAddr(dst)
	id.timeout = max(id.timeout, timeout)
	id.ctx = cmContext
	id.state = idAddrResolved
	ch.push(verbs.CMEvent{Type: verbs.EventAddrResolved, ID: id})
	return nil
}

func (id *cmID) ResolveRoute(timeout time.Duration) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state != idAddrResolved {
		return verbs.Errorf("rdma_resolve_route", syscall.EINVAL, "resolve the address first")
	}
	id.timeout = max(id.timeout, timeout)
	id.state = idRouteResolved
	// The TCP connection opens now, while the consumer creates its QP
	// (connect.go).
	id.startActive(nil, time.Now().Add(id.connectTimeout()))
	id.ch.push(verbs.CMEvent{Type: verbs.EventRouteResolved, ID: id})
	return nil
}
