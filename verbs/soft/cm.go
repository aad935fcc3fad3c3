package soft

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/phase"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/internal/cmevents"
)

// Listener limits. A TCP connection to a listening port has at most
// handshakeTimeout for its whole REQ to arrive; then it holds one of
// maxHandshakes slots while the REQ is read and reported (and its shared
// memory, if offered, is set up, at most shmSetupTimeout); the connections
// of one remote host hold at most maxHandshakesPerHost of them, so that one
// host cannot lock out the others (admission.go).
var (
	handshakeTimeout     atomic.Int64
	maxHandshakes        atomic.Int64
	maxHandshakesPerHost atomic.Int64
)

const (
	defaultHandshakeTimeout     = 5 * time.Second
	defaultMaxHandshakes        = 64
	defaultMaxHandshakesPerHost = 8
)

func init() {
	handshakeTimeout.Store(int64(defaultHandshakeTimeout))
	maxHandshakes.Store(defaultMaxHandshakes)
	maxHandshakesPerHost.Store(defaultMaxHandshakesPerHost)
}

// SetHandshakeTimeout sets how long a connection to a soft listener may
// take to deliver its connection request before it is dropped (default 5
// s), and, twice that, how long an accepted request may take to send its
// RTU before the connection fails, for listeners started afterwards. It
// returns the previous value.
func SetHandshakeTimeout(d time.Duration) time.Duration {
	return time.Duration(handshakeTimeout.Swap(int64(d)))
}

// SetMaxHandshakes sets how many connection requests one soft listener
// reads and sets up at once (default 64); more wait their turn, within the
// handshake timeout. It applies to listeners started afterwards and returns
// the previous value.
func SetMaxHandshakes(n int) int { return int(maxHandshakes.Swap(int64(n))) }

// SetMaxHandshakesPerHost sets how many of a soft listener's handshake
// slots the connections from one remote host may hold at once (default 8;
// an IPv6 host is its /64), so that one host cannot lock out the others; a
// host's connections beyond that wait their turn. It applies to listeners
// started afterwards and returns the previous value.
func SetMaxHandshakesPerHost(n int) int { return int(maxHandshakesPerHost.Swap(int64(n))) }

const (
	defaultConnectTimeout = 10 * time.Second
	disconnectTimeout     = 3 * time.Second
	// heldRequestTimeout is how long a connect waits for the answer to a
	// request that its listener holds (it sent an MRA), as the kernel's
	// RDMA CM does: rdma_cm answers every request it reports with an MRA
	// of service timeout 24 (CMA_CM_MRA_SETTING; the IB CM waits 2^(24-8)
	// ms = 65.5 s for it) and the REQ is sent 1 + 15 times
	// (CMA_MAX_CM_RETRIES) before the connect fails with UNREACHABLE.
	heldRequestTimeout = 16 * 65536 * time.Millisecond
	defaultBacklog     = 128
)

// eventChannel queues CM events; waiters park on a Go channel.
type eventChannel struct {
	events *cmevents.Queue
}

func newEventChannel() *eventChannel {
	return &eventChannel{events: cmevents.New()}
}

func (c *eventChannel) push(ev verbs.CMEvent) { c.events.Push(ev) }

func (c *eventChannel) CreateID() (verbs.CMID, error) {
	if c.events.Closed() {
		return nil, verbs.ErrClosed
	}
	return newCMID(c), nil
}

// newCMID returns an idle ID reporting to ch (nil: set later).
func newCMID(ch *eventChannel) *cmID {
	id := &cmID{ch: ch}
	id.life, id.end = context.WithCancel(context.Background())
	return id
}

// NotifyEvents is verbs.EventNotifier's.
func (c *eventChannel) NotifyEvents(f func(verbs.CMEventType)) { c.events.Notify(f) }

func (c *eventChannel) GetEvent(deadline time.Time) (verbs.CMEvent, error) {
	return c.events.Get(deadline)
}

func (c *eventChannel) Close() error {
	if !c.events.Close() {
		return verbs.ErrClosed
	}
	return nil
}

type idState int

const (
	idIdle idState = iota
	idBound
	idListening
	idAddrResolved
	idRouteResolved
	idConnecting
	idConnectRequest // passive side, before Accept/Reject
	idAccepting      // passive side, REP sent, waiting for RTU
	idConnected
	idDisconnecting
	idDone // disconnected, rejected or failed
)

// cmID is an RDMA CM ID. A listening ID owns a TCP listener at its
// address; a connection's ID owns the TCP connection (through its QP's
// engine once connected).
type cmID struct {
	mu     sync.Mutex
	ch     *eventChannel
	state  idState
	local  *net.TCPAddr
	remote *net.TCPAddr
	// srcGiven is set when the caller chose the source address (BindAddr,
	// ResolveAddr's src): only then is the TCP connection bound to it.
	srcGiven  bool
	timeout   time.Duration
	ctx       *device
	qp        *qp
	destroyed bool
	// life ends when the ID is destroyed: what waits on the network for
	// the ID is cut short then (context.AfterFunc, no goroutine each).
	life context.Context
	end  context.CancelFunc
	wg   sync.WaitGroup

	// Listening IDs.
	ln      *net.TCPListener
	slots   *admission
	pending int
	backlog int
	// backlogFreed, when a request waits for room in the backlog, is
	// closed (and dropped) when an entry is freed.
	backlogFreed chan struct{}

	// Connection-request IDs (passive side).
	// SetAckTimeout's exponent, when set: the QP's Timeout once connected.
	ackTimeout    int
	ackTimeoutSet bool
	// SetTOS's type of service, when set (tos.go).
	tos    int
	tosSet bool

	parent *cmID
	tr     *tcpTransport
	req    hsMsg
	shm    *shmPrepared // shared memory set up for this request (shm_offer_linux.go)
	// shmDone, when the request offers shared memory, is closed once the
	// answer to the offer is settled (shm set, or not); Accept waits for
	// it. The answer runs while the consumer sets up its side.
	shmDone chan struct{}
	// shmX, when the request offers shared memory set up off the
	// connection's path (version 4), receives this side's exchange, run
	// in the background; Accept does not wait for it.
	shmX *shmExchange

	// Connecting IDs: the attempt under way (connect.go).
	active *activeHandshake
}

func (id *cmID) event(typ verbs.CMEventType, status int, param verbs.ConnParam) {
	id.mu.Lock()
	ch := id.ch
	id.mu.Unlock()
	ch.push(verbs.CMEvent{Type: typ, ID: id, Status: status, Param: param})
}

// localIP reports whether ip is an address of this host.
func localIP(ip net.IP) bool {
	if ip.IsUnspecified() || ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func copyAddr(a *net.TCPAddr) *net.TCPAddr {
	if a == nil {
		return nil
	}
	b := *a
	b.IP = append(net.IP(nil), a.IP...)
	return &b
}

func (id *cmID) BindAddr(addr *net.TCPAddr) error {
	const op = "rdma_bind_addr"
	if addr == nil || addr.IP == nil || addr.Port < 0 || addr.Port > 65535 {
		return verbs.Errorf(op, syscall.EINVAL, "need an IP address and a port")
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state != idIdle {
		return verbs.Errorf(op, syscall.EINVAL, "ID already bound")
	}
	if !localIP(addr.IP) {
		return verbs.Errorf(op, syscall.EADDRNOTAVAIL, "%v is not an address of this host", addr.IP)
	}
	id.local = copyAddr(addr)
	id.state = idBound
	id.ctx = cmContext
	return nil
}

func (id *cmID) Listen(backlog int) error {
	const op = "rdma_listen"
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state == idIdle {
		// As rdma_listen does: an unbound ID is bound to the wildcard
		// address and a free port first.
		id.local = &net.TCPAddr{IP: net.IPv4zero}
		id.ctx = cmContext
		id.state = idBound
	}
	if id.state != idBound {
		return verbs.Errorf(op, syscall.EINVAL, "ID is already listening or connecting")
	}
	// Go's TCP keepalive off, as on the dialing side (dialTCP).
	nl, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", id.local.String())
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EADDRINUSE
		}
		return verbs.Errorf(op, errno, "%v", err)
	}
	ln := nl.(*net.TCPListener)
	id.ln = ln
	id.local = copyAddr(ln.Addr().(*net.TCPAddr))
	if backlog <= 0 {
		backlog = defaultBacklog
	}
	id.backlog = backlog
	hsTimeout := time.Duration(handshakeTimeout.Load())
	// A connection's handshake starts once it has a waiting place
	// (admission.go): at once, or when one frees up. Whoever gives it
	// the place is one of the ID's goroutines (the accept loop, or a
	// handshake that ends), so that Destroy waits for it too.
	id.slots = newAdmission(max(1, int(maxHandshakes.Load())), max(1, int(maxHandshakesPerHost.Load())),
		func(slot *hsSlot) {
			id.wg.Add(1)
			go id.handshake(slot.c, hsTimeout, slot)
		})
	id.state = idListening
	id.wg.Add(1)
	go id.acceptLoop(ln)
	return nil
}

func (id *cmID) acceptLoop(ln *net.TCPListener) {
	defer id.wg.Done()
	defer id.slots.shut()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of fds and the like: back off briefly, keep serving.
			select {
			case <-id.life.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		phase.Mark("soft listen: TCP accepted")
		id.slots.arrive(c) // never waits: one host's connections must not hold up the others'
	}
}

// readHandshake reads one handshake message from tr.
func readHandshake(tr *tcpTransport) (hsMsg, error) {
	var hb [hsHdrLen]byte
	if err := tr.readPayload(hb[:], nil); err != nil {
		return hsMsg{}, err
	}
	_, n, err := parseHandshakeHeader(hb[:])
	if err != nil {
		return hsMsg{}, err
	}
	b := make([]byte, hsHdrLen+n)
	copy(b, hb[:])
	if err := tr.readPayload(b[hsHdrLen:], nil); err != nil {
		return hsMsg{}, err
	}
	return parseHandshake(b)
}

// handshake reads a connection request on a freshly accepted connection
// and turns it into EventConnectRequest. Anything else is dropped.
func (id *cmID) handshake(c *net.TCPConn, hsTimeout time.Duration, slot *hsSlot) {
	defer id.wg.Done()
	phase.Mark("soft listen: handshake running")
	// The slot (or the place in the waiting list) goes back at the latest
	// on return; sooner once the request can be answered, below.
	release := func() { id.slots.release(slot) }
	defer release()
	tr, err := newTCPTransport(c)
	if err != nil {
		c.Close()
		return
	}
	deadline := time.Now().Add(hsTimeout)
	// A connection that has waited silentAfter without its request gives
	// its place up then to a parked one, if there is one that could take
	// it (admission.go); else it waits on, to the deadline.
	giveWay := time.Now().Add(id.slots.silentAfter)
	_ = tr.setReadDeadline(giveWay)
	if deadline.Before(giveWay) {
		_ = tr.setReadDeadline(deadline)
	}
	// Destroying the listener ends handshakes in progress.
	stopped := make(chan struct{})
	stop := context.AfterFunc(id.life, func() {
		close(stopped) // first: a deadline set after this sees it
		_ = tr.setReadDeadline(time.Unix(1, 0))
	})
	// A slot only once the request is there (admission.go).
	err = awaitRequest(tr)
	again := errors.Is(err, os.ErrDeadlineExceeded) && giveWay.Before(deadline)
	if again && id.slots.giveWay(slot) {
		c.Close()
		stop()
		return
	}
	// The handshake's deadline from now on (the read below has it too),
	// unless the listener's end came meanwhile.
	_ = tr.setReadDeadline(deadline)
	select {
	case <-stopped:
		_ = tr.setReadDeadline(time.Unix(1, 0))
	default:
	}
	if again {
		err = awaitRequest(tr)
	}
	ok := err == nil && id.slots.awaitSlot(id.life, slot, deadline)
	var m hsMsg
	if ok {
		m, err = readHandshake(tr)
	}
	stop()
	if !ok || err != nil || m.typ != msgREQ {
		c.Close()
		return
	}
	phase.Mark("soft listen: REQ read")
	_ = tr.setReadDeadline(time.Time{})
	shmDeadline := time.Now().Add(hsTimeout)
	child := newCMID(nil)
	child.state, child.parent, child.tr, child.req, child.ctx = idConnectRequest, id, tr, m, cmContext
	// Accept's bound on the REP's write and the wait for the RTU (10 s by
	// default).
	child.timeout = 2 * hsTimeout
	child.local, child.remote = copyAddr(c.LocalAddr().(*net.TCPAddr)), copyAddr(c.RemoteAddr().(*net.TCPAddr))
	switch {
	case shmSwitchOffered(&m, c):
		// Answered "TCP now, shared memory to follow": the exchange
		// runs when the connection asks for it (shm_switch_linux.go).
		child.shmX = newShmExchange()
	case m.transports&transportShm != 0:
		child.shmDone = make(chan struct{})
	}
	// Setting up shared memory (a local exchange, at most shmSetupTimeout) still
	// holds the handshake slot, so that requests naming slow sockets are
	// bounded like slow requests.
	if !id.awaitBacklog(shmDeadline) {
		c.Close()
		return
	}
	id.pending++
	child.ch = id.ch
	ch := id.ch
	id.mu.Unlock()
	if m.transports&reqTakesMRA != 0 {
		// The request is about to reach the consumer, which may hold it:
		// tell the connecting side, so that it waits for the answer.
		mra, _ := (&hsMsg{typ: msgMRA}).marshal()
		_ = c.SetWriteDeadline(time.Now().Add(hsTimeout))
		_, err := c.Write(mra)
		_ = c.SetWriteDeadline(time.Time{})
		if err != nil {
			id.mu.Lock()
			id.unpend()
			id.mu.Unlock()
			c.Close()
			return
		}
	}
	phase.Mark("soft listen: request reported")
	if child.shmDone == nil {
		// Free before the request can be answered: a client that dials
		// again as soon as it is connected finds the slot free.
		release()
	}
	ch.push(verbs.CMEvent{Type: verbs.EventConnectRequest, ID: child, Listen: id, Param: verbs.ConnParam{
		PrivateData:        padPrivateData(m.priv, verbs.MaxPrivateDataConnect),
		ResponderResources: int(m.respRes),
		InitiatorDepth:     int(m.initDepth),
		RetryCount:         int(m.retry),
		RNRRetryCount:      int(m.rnrRetry),
	}})
	if child.shmDone != nil {
		// The ring exchange overlaps the consumer's setup (its QP and
		// memory) instead of coming before the request is reported.
		shm := shmAnswer(&m, c, shmDeadline)
		child.mu.Lock()
		if child.destroyed || child.state != idConnectRequest {
			shm.abort() // rejected or destroyed meanwhile
		} else {
			child.shm = shm
		}
		child.mu.Unlock()
		release()
		close(child.shmDone)
	}
}

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
	if srcIP != nil && !localIP(srcIP) {
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

func (id *cmID) Context() verbs.Context {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.ctx == nil {
		return nil
	}
	return id.ctx
}

func (id *cmID) CreateQP(pdi verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error) {
	const op = "rdma_create_qp"
	p, ok := pdi.(*pd)
	if !ok || p == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "PD is not from the soft provider")
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return nil, verbs.ErrClosed
	}
	if id.qp != nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "ID already has a QP")
	}
	if id.ctx == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "ID has no device yet: bind or resolve an address first")
	}
	q, err := newQP(p, attr)
	if err != nil {
		return nil, err
	}
	q.id = id
	q.state = verbs.QPSInit // rdma_create_qp moves the QP to INIT
	id.qp = q
	return q, nil
}

func (id *cmID) QP() verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp == nil {
		return nil
	}
	return id.qp
}

func (id *cmID) qpDestroyed(q *qp) {
	id.mu.Lock()
	if id.qp == q {
		id.qp = nil
	}
	id.mu.Unlock()
}

func checkParam(op string, p *verbs.ConnParam, limit int) error {
	if len(p.PrivateData) > limit {
		return verbs.Errorf(op, syscall.EINVAL, "%d bytes of private data, at most %d", len(p.PrivateData), limit)
	}
	if p.RetryCount < 0 || p.RetryCount > 7 || p.RNRRetryCount < 0 || p.RNRRetryCount > 7 ||
		p.ResponderResources < 0 || p.ResponderResources > maxRdAtom || p.InitiatorDepth < 0 || p.InitiatorDepth > maxRdAtom {
		return verbs.Errorf(op, syscall.EINVAL, "connection parameter out of range")
	}
	return nil
}

// engineDown is called once when a connection's engine stops.
func (id *cmID) engineDown(error) {
	id.mu.Lock()
	st := id.state
	id.state = idDone
	id.mu.Unlock()
	switch st {
	case idConnected, idDisconnecting:
		id.event(verbs.EventDisconnected, 0, verbs.ConnParam{})
	case idAccepting:
		id.event(verbs.EventConnectError, -int(syscall.ECONNRESET), verbs.ConnParam{})
	}
}

// SetAckTimeout is rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT): the QP
// takes the exponent as its Timeout when it is connected (Connect, Accept).
func (id *cmID) SetAckTimeout(exp int) error {
	if exp < 0 || exp > verbs.MaxAckTimeout {
		return verbs.Errorf("rdma_set_option", syscall.EINVAL, "ACK timeout exponent %d out of range [0, %d]", exp, verbs.MaxAckTimeout)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	id.ackTimeout, id.ackTimeoutSet = exp, true
	return nil
}

// SetTOS is rdma_set_option(RDMA_OPTION_ID_TOS): the type of service of
// the TCP socket under the connection (tos.go). On a connection request it
// applies at once, to the request's socket.
func (id *cmID) SetTOS(tos int) error {
	if tos < 0 || tos > verbs.MaxTOS {
		return verbs.Errorf("rdma_set_option", syscall.EINVAL, "type of service %d out of range [0, %d]", tos, verbs.MaxTOS)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	id.tos, id.tosSet = tos, true
	if id.tr != nil {
		if err := setConnTOS(id.tr.c, tos); err != nil {
			return verbs.Errorf("rdma_set_option", syscall.EINVAL, "IP type of service: %v", err)
		}
	}
	return nil
}

func (id *cmID) Accept(param *verbs.ConnParam) error {
	const op = "rdma_accept"
	if param == nil {
		param = &verbs.ConnParam{}
	}
	if err := checkParam(op, param, verbs.MaxPrivateDataAccept); err != nil {
		return err
	}
	if id.shmDone != nil {
		// The offer's answer, at most shmSetupTimeout away; set with the
		// request, never changed.
		<-id.shmDone
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	q, err := id.openingQP(op, idConnectRequest, "no connection request to accept")
	if err != nil {
		return err
	}
	if id.ackTimeoutSet {
		q.mu.Lock()
		q.attr.Timeout = id.ackTimeout
		q.mu.Unlock()
	}
	rep := hsMsg{typ: msgREP, qpn: q.num, sqDepth: uint32(q.cap.MaxSendWR), rqDepth: uint32(q.cap.MaxRecvWR),
		respRes: uint8(param.ResponderResources), initDepth: uint8(param.InitiatorDepth),
		retry: uint8(param.RetryCount), rnrRetry: uint8(param.RNRRetryCount),
		transports: transportTCP, priv: param.PrivateData}
	if id.shm != nil {
		rep.transports = transportShm
	} else if id.shmX != nil {
		rep.transports = transportShmSwitch
	}
	b, err := rep.marshal()
	if err != nil {
		return verbs.Errorf(op, syscall.EINVAL, "%v", err)
	}
	c := id.tr.c
	_ = c.SetWriteDeadline(time.Now().Add(id.timeout))
	if _, err := c.Write(b); err != nil {
		return verbs.Errorf(op, syscall.ECONNRESET, "%v", err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	phase.Mark("soft accept: REP sent")
	id.releasePending()
	id.state = idAccepting
	tr := id.tr
	id.tr = nil
	req := id.req
	rtuWait := id.timeout
	var etr transport = tr
	if id.shm != nil {
		// The RTU still comes on TCP (read below); frames go through
		// shared memory.
		st, err := id.shm.start(tr.c)
		id.shm = nil
		if err != nil {
			_ = tr.close()
			return verbs.Errorf(op, syscall.ECONNRESET, "%v", err)
		}
		etr = st
	} else if id.shmX != nil {
		// Frames start on TCP now, and move to the rings once the
		// active side invites this side to its exchange, and it is
		// through.
		etr = newSwitchPassive(tr, &req, id.shmX)
		id.shmX = nil
	}
	q.mu.Lock()
	q.sock = tr.c
	q.mu.Unlock()
	q.start(etr, &req, id.engineDown)
	q.mu.Lock()
	q.attr.RetryCnt = int(req.retry)
	q.attr.RNRRetry = int(req.rnrRetry)
	if param.ResponderResources > 0 {
		q.attr.MaxDestRdAtomic = param.ResponderResources
	}
	if param.InitiatorDepth > 0 {
		q.attr.MaxRdAtomic = min(param.InitiatorDepth, max(int(req.respRes), 1))
	}
	if q.state == verbs.QPSInit {
		q.setState(verbs.QPSRTR)
		q.setState(verbs.QPSRTS)
	}
	q.mu.Unlock()
	q.startReceiver(func() error {
		_ = tr.setReadDeadline(time.Now().Add(rtuWait))
		m, err := readHandshake(tr)
		if err != nil {
			return err
		}
		if m.typ != msgRTU {
			return errBadHandshake
		}
		phase.Mark("soft accept: RTU read")
		_ = tr.setReadDeadline(time.Time{})
		id.mu.Lock()
		ok := id.state == idAccepting
		if ok {
			id.state = idConnected
		}
		id.mu.Unlock()
		if ok {
			id.event(verbs.EventEstablished, 0, verbs.ConnParam{})
		}
		return nil
	})
	return nil
}

// openingQP is what Connect and Accept (op) check first: the ID is in
// state want (else EINVAL, saying why not) and has a QP, which it returns.
// Called with mu held.
func (id *cmID) openingQP(op string, want idState, why string) (*qp, error) {
	if id.destroyed {
		return nil, verbs.ErrClosed
	}
	if id.state != want {
		return nil, verbs.Errorf(op, syscall.EINVAL, "%s", why)
	}
	if id.qp == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "create a QP on the ID first")
	}
	return id.qp, nil
}

// awaitBacklog waits until the listener's backlog has room, as the kernel's
// connection manager has a request retried rather than refused: true, with
// id.mu held, once it has; false if the deadline passes or the listener is
// destroyed first. A request reported waits in the backlog until the
// consumer accepts or rejects it.
func (id *cmID) awaitBacklog(deadline time.Time) bool {
	var w waiter
	defer w.stop()
	for {
		id.mu.Lock()
		if id.destroyed {
			id.mu.Unlock()
			return false
		}
		if id.pending < id.backlog {
			return true
		}
		if id.backlogFreed == nil {
			id.backlogFreed = make(chan struct{})
		}
		freed := id.backlogFreed
		id.mu.Unlock()
		if !w.wait(id.life, freed, deadline) {
			return false
		}
	}
}

// releasePending frees the listener's backlog entry. Called with id.mu held.
func (id *cmID) releasePending() {
	if p := id.parent; p != nil && id.state == idConnectRequest {
		p.mu.Lock()
		p.unpend()
		p.mu.Unlock()
	}
}

// unpend frees a backlog entry of the listening id. Called with id.mu held.
func (id *cmID) unpend() {
	id.pending--
	if id.backlogFreed != nil {
		close(id.backlogFreed)
		id.backlogFreed = nil
	}
}

func (id *cmID) Reject(privateData []byte) error {
	const op = "rdma_reject"
	if len(privateData) > verbs.MaxPrivateDataReject {
		return verbs.Errorf(op, syscall.EINVAL, "%d bytes of private data, at most %d", len(privateData), verbs.MaxPrivateDataReject)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state != idConnectRequest {
		return verbs.Errorf(op, syscall.EINVAL, "no connection request to reject")
	}
	b, _ := (&hsMsg{typ: msgREJ, priv: privateData}).marshal()
	c := id.tr.c
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Write(b)
	c.Close()
	id.shm.abort()
	id.shm = nil
	id.shmX.drop()
	id.shmX = nil
	id.releasePending()
	id.state = idDone
	id.tr = nil
	if err != nil {
		return verbs.Errorf(op, syscall.ECONNRESET, "%v", err)
	}
	return nil
}

func (id *cmID) Disconnect() error {
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		return verbs.ErrClosed
	}
	switch id.state {
	case idConnected, idAccepting:
	case idDisconnecting, idDone:
		id.mu.Unlock()
		return nil
	default:
		id.mu.Unlock()
		return verbs.Errorf("rdma_disconnect", syscall.EINVAL, "ID is not connected")
	}
	if id.state == idAccepting {
		// Not established yet: report as a disconnect once the engine stops.
		id.state = idConnected
	}
	id.state = idDisconnecting
	q := id.qp
	id.mu.Unlock()
	if q != nil {
		q.disconnect(disconnectTimeout)
	}
	return nil
}

func (id *cmID) Migrate(ch verbs.EventChannel) error {
	c, ok := ch.(*eventChannel)
	if !ok || c == nil {
		return verbs.Errorf("rdma_migrate_id", syscall.EINVAL, "event channel is not from the soft provider")
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	id.ch = c
	return nil
}

func (id *cmID) LocalAddr() *net.TCPAddr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return copyAddr(id.local)
}

func (id *cmID) RemoteAddr() *net.TCPAddr {
	id.mu.Lock()
	defer id.mu.Unlock()
	return copyAddr(id.remote)
}

func (id *cmID) Destroy() error {
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		return verbs.ErrClosed
	}
	if id.qp != nil {
		id.mu.Unlock()
		return verbs.Errorf("rdma_destroy_id", syscall.EBUSY, "destroy the ID's QP first")
	}
	if id.state == idConnectRequest && id.tr != nil {
		// A request destroyed unanswered is rejected, as the kernel's CM
		// does (a consumer reject without private data).
		rej, _ := (&hsMsg{typ: msgREJ}).marshal()
		_ = id.tr.c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = id.tr.c.Write(rej)
	}
	id.releasePending()
	id.destroyed = true
	id.end()
	if id.ln != nil {
		id.ln.Close()
	}
	if id.tr != nil {
		id.tr.close()
		id.tr = nil
	}
	id.shm.abort()
	id.shm = nil
	id.shmX.drop()
	id.shmX = nil
	id.mu.Unlock()
	id.wg.Wait()
	return nil
}

// padPrivateData returns a copy of the private data a peer sent, zero-padded
// to the CM message's whole private data field (limit bytes), as the kernel
// delivers it: the IB CM carries no length, so the receiver cannot tell the
// sender's length from trailing zeros.
func padPrivateData(b []byte, limit int) []byte {
	p := make([]byte, max(limit, len(b)))
	copy(p, b)
	return p
}
