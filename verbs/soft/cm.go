package soft

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/hostaddr"
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
	mu    sync.Mutex
	ch    *eventChannel
	state idState
	// upPending: connected, its ESTABLISHED not yet reported; downPending:
	// the engine stopped meanwhile, and DISCONNECTED follows ESTABLISHED
	// (established).
	upPending, downPending bool
	local                  *net.TCPAddr
	remote                 *net.TCPAddr
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

// connectedLocked marks the ID connected, its ESTABLISHED event to be
// reported by established: a connection's engine starts before that, and
// a disconnect it sees meanwhile must not be reported first (a CM reports
// DISCONNECTED only after ESTABLISHED). Called with id.mu held.
func (id *cmID) connectedLocked() {
	id.state = idConnected
	id.upPending = true
}

// established reports ESTABLISHED, and then the disconnect the engine saw
// since connectedLocked, if it did.
func (id *cmID) established(param verbs.ConnParam) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.upPending = false
	id.ch.push(verbs.CMEvent{Type: verbs.EventEstablished, ID: id, Param: param})
	if id.downPending {
		id.downPending = false
		id.ch.push(verbs.CMEvent{Type: verbs.EventDisconnected, ID: id})
	}
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
	if err := id.inState(op, idIdle, "ID already bound"); err != nil {
		return err
	}
	if !hostaddr.Local(addr.IP) {
		return verbs.Errorf(op, syscall.EADDRNOTAVAIL, "%v is not an address of this host", addr.IP)
	}
	id.local = copyAddr(addr)
	id.state = idBound
	id.ctx = cmContext
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
	if id.upPending && (st == idConnected || st == idDisconnecting) {
		id.downPending = true // reported after ESTABLISHED
		id.mu.Unlock()
		return
	}
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
	return id.setOption("ACK timeout exponent", exp, verbs.MaxAckTimeout, func() error {
		id.ackTimeout, id.ackTimeoutSet = exp, true
		return nil
	})
}

// SetTOS is rdma_set_option(RDMA_OPTION_ID_TOS): the type of service of
// the TCP socket under the connection (tos.go). On a connection request it
// applies at once, to the request's socket.
func (id *cmID) SetTOS(tos int) error {
	return id.setOption("type of service", tos, verbs.MaxTOS, func() error {
		id.tos, id.tosSet = tos, true
		if id.tr != nil {
			if err := setConnTOS(id.tr.c, tos); err != nil {
				return verbs.Errorf("rdma_set_option", syscall.EINVAL, "IP type of service: %v", err)
			}
		}
		return nil
	})
}

// setOption is rdma_set_option's checks: v, the option named what, lies in
// [0, limit], and the ID is not destroyed. set stores the option, with mu
// held.
func (id *cmID) setOption(what string, v, limit int, set func() error) error {
	if v < 0 || v > limit {
		return verbs.Errorf("rdma_set_option", syscall.EINVAL, "%s %d out of range [0, %d]", what, v, limit)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.destroyed {
		return verbs.ErrClosed
	}
	return set()
}

// inState is what a call (op) that needs the ID in state want checks
// first, with mu held: the ID is not destroyed, and it is in state want
// (else EINVAL, saying why not).
func (id *cmID) inState(op string, want idState, why string) error {
	if id.destroyed {
		return verbs.ErrClosed
	}
	if id.state != want {
		return verbs.Errorf(op, syscall.EINVAL, "%s", why)
	}
	return nil
}

// openingQP is what Connect and Accept (op) check first: the ID is in
// state want (else EINVAL, saying why not) and has a QP, which it returns.
// Called with mu held.
func (id *cmID) openingQP(op string, want idState, why string) (*qp, error) {
	if err := id.inState(op, want, why); err != nil {
		return nil, err
	}
	if id.qp == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "create a QP on the ID first")
	}
	return id.qp, nil
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
