//go:build cgo && linux

package rdmacore

import (
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/internal/cmevents"
)

// cmEventMu serialises rdma_get_cm_event, which moves QPs through their
// states for some events (RTR/RTS on a connect response, ERR on a reject),
// with QP destruction: the kernel refuses (EBUSY) to destroy a QP that
// another thread is modifying.
var cmEventMu sync.Mutex

// ids maps librdmacm's IDs to their Go wrappers, for the IDs events name.
var ids wrappers[idPtr, cmid]

// eventChannel is a verbs.EventChannel. A goroutine per channel (parked on
// Go's runtime poller, never an OS thread) takes librdmacm's events as they
// come, copies and acknowledges them, and queues them for GetEvent. Taking
// them eagerly is what lets the channel answer a peer's disconnect at once,
// as the verbs contract says (see answerDisconnect).
//
// Closing the channel stops the goroutine and unblocks GetEvent; the C
// channel itself is destroyed when its last ID is, since librdmacm's IDs
// keep using it.
type eventChannel struct {
	p    ecPtr
	w    *fdWaiter
	out  cmEvOutPtr // C out-parameter of rdma_get_cm_event, the pump's alone
	done chan struct{}

	events *cmevents.Queue

	mu    sync.Mutex
	dead  bool // closed by the user; the C channel lives on while IDs use it
	nids  int  // IDs on this channel
	freed bool
}

var _ verbs.EventChannel = (*eventChannel)(nil)

func newEventChannel() (*eventChannel, error) {
	p, fd, errno := rdmaCreateEventChannel()
	if errno != 0 {
		return nil, &verbs.Error{Op: "rdma_create_event_channel", Errno: errno}
	}
	w, err := newFDWaiter(fd, "rdma_event_channel")
	if err != nil {
		rdmaDestroyEventChannel(p)
		return nil, err
	}
	c := &eventChannel{p: p, w: w, out: allocCMEventOut(), done: make(chan struct{}),
		events: cmevents.New()}
	go c.pump()
	return c, nil
}

// pump moves events from librdmacm to the Go queue until the channel closes.
func (c *eventChannel) pump() {
	defer close(c.done)
	var ev cmEventPtr
	var errno syscall.Errno
	try := func(uintptr) bool {
		cmEventMu.Lock()
		ev, errno = rdmaGetCMEvent(c.p, c.out)
		cmEventMu.Unlock()
		return errno != syscall.EAGAIN
	}
	for {
		if err := c.w.wait(try); err != nil {
			return
		}
		if errno != 0 {
			// Only a broken channel fails here; say so to the waiters.
			c.push(verbs.CMEvent{Type: verbs.EventDeviceRemoval, Status: int(errno)})
			return
		}
		if e, ok := c.deliver(ev); ok {
			c.push(e)
		}
	}
}

func (c *eventChannel) push(ev verbs.CMEvent) { c.events.Push(ev) }

// CreateID is rdma_create_id with RDMA_PS_TCP.
func (c *eventChannel) CreateID() (verbs.CMID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil, verbs.ErrClosed
	}
	p, errno := rdmaCreateID(c.p)
	if errno != 0 {
		return nil, &verbs.Error{Op: "rdma_create_id", Errno: errno}
	}
	return c.adoptLocked(p), nil
}

// adoptLocked wraps a new librdmacm ID that lives on c.
func (c *eventChannel) adoptLocked(p idPtr) *cmid {
	id := &cmid{p: p, ch: c}
	c.nids++
	ids.add(p, id)
	return id
}

// GetEvent returns the next event, waiting until the deadline (zero: none).
func (c *eventChannel) GetEvent(deadline time.Time) (verbs.CMEvent, error) {
	return c.events.Get(deadline)
}

// deliver copies and acknowledges a C event; ok is false for an event about
// an ID that is being destroyed, which nobody is left to receive.
func (c *eventChannel) deliver(p cmEventPtr) (verbs.CMEvent, bool) {
	raw := readCMEvent(p)
	ev := verbs.CMEvent{Type: raw.typ, Status: raw.status, Param: raw.param}
	if raw.typ == verbs.EventConnectRequest {
		listen := ids.get(raw.listen)
		rdmaAckCMEvent(p)
		if listen == nil {
			// The listener is going away: refuse the connection.
			rdmaReject(raw.id, nil)
			rdmaDestroyID(raw.id)
			return ev, false
		}
		// librdmacm puts the new ID on the listener's channel: this one.
		c.mu.Lock()
		ev.ID = c.adoptLocked(raw.id)
		c.mu.Unlock()
		ev.Listen = listen
		return ev, true
	}
	id := ids.get(raw.id)
	rdmaAckCMEvent(p)
	if id == nil {
		return ev, false
	}
	ev.ID = id
	if ev.Status < 0 {
		// librdmacm reports some failures as negative errnos (-ETIMEDOUT
		// when the peer does not answer): keep errnos positive.
		ev.Status = -ev.Status
	}
	if raw.typ == verbs.EventDisconnected {
		id.answerDisconnect()
	}
	return ev, true
}

// Close unblocks pending GetEvent calls and stops new ones. The C channel is
// destroyed now if no ID uses it, else when the last ID is destroyed.
func (c *eventChannel) Close() error {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return verbs.ErrClosed
	}
	c.dead = true
	c.events.Close()
	c.mu.Unlock()
	c.w.close()
	<-c.done // the pump is out of rdma_get_cm_event for good
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maybeFreeLocked()
	return nil
}

func (c *eventChannel) maybeFreeLocked() {
	if c.dead && c.nids == 0 && !c.freed {
		c.freed = true
		rdmaDestroyEventChannel(c.p)
		freeCMEventOut(c.out)
	}
}

func (c *eventChannel) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nids--
	c.maybeFreeLocked()
}

// cmid is a verbs.CMID.
type cmid struct {
	p    idPtr
	mu   sync.Mutex
	ch   *eventChannel
	qp   *queuePair
	dead bool
	// disconnected: rdma_disconnect was called, by Disconnect or by
	// answerDisconnect.
	disconnected bool
}

var _ verbs.CMID = (*cmid)(nil)

func (id *cmid) op(name string, errno syscall.Errno) error {
	if errno == 0 {
		return nil
	}
	return &verbs.Error{Op: name, Errno: errno}
}

// live takes id.mu and reports whether the ID is still usable; the caller
// unlocks.
func (id *cmid) live() bool {
	id.mu.Lock()
	return !id.dead
}

// needDevice refuses, as EINVAL, the calls that need the ID bound to a device:
// librdmacm dereferences id->verbs in them without checking.
func (id *cmid) needDevice(op string) error {
	if idVerbs(id.p) == nil {
		return verbs.Errorf(op, syscall.EINVAL, "the ID has no device yet: resolve its address first")
	}
	return nil
}

func scopeOf(a *net.TCPAddr) uint32 {
	if a == nil || a.Zone == "" {
		return 0
	}
	if ifi, err := net.InterfaceByName(a.Zone); err == nil {
		return uint32(ifi.Index)
	}
	return 0
}

func (id *cmid) BindAddr(addr *net.TCPAddr) error {
	if addr == nil {
		return verbs.Errorf("rdma_bind_addr", syscall.EINVAL, "nil address")
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	return id.op("rdma_bind_addr", rdmaBindAddr(id.p, addr, scopeOf(addr)))
}

func (id *cmid) Listen(backlog int) error {
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	return id.op("rdma_listen", rdmaListen(id.p, backlog))
}

func ms(d time.Duration) int {
	if d <= 0 {
		return 2000 // librdmacm's own default wait
	}
	return int(max(d/time.Millisecond, 1))
}

func (id *cmid) ResolveAddr(src, dst *net.TCPAddr, timeout time.Duration) error {
	if dst == nil {
		return verbs.Errorf("rdma_resolve_addr", syscall.EINVAL, "nil destination")
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	return id.op("rdma_resolve_addr", rdmaResolveAddr(id.p, src, scopeOf(src), dst, scopeOf(dst), ms(timeout)))
}

func (id *cmid) ResolveRoute(timeout time.Duration) error {
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	if err := id.needDevice("rdma_resolve_route"); err != nil {
		return err
	}
	return id.op("rdma_resolve_route", rdmaResolveRoute(id.p, ms(timeout)))
}

func (id *cmid) Context() verbs.Context {
	defer id.mu.Unlock()
	if !id.live() {
		return nil
	}
	p := idVerbs(id.p)
	if p == nil {
		return nil
	}
	return sharedContext(p)
}

// CreateQP is rdma_create_qp: an RC QP on the ID's device, driven by the CM.
func (id *cmid) CreateQP(pd verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error) {
	if attr == nil {
		return nil, verbs.Errorf("rdma_create_qp", syscall.EINVAL, "nil attributes")
	}
	p, ok := pd.(*protDomain)
	if !ok || p == nil {
		return nil, verbs.Errorf("rdma_create_qp", syscall.EINVAL, "PD from another provider")
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, verbs.Errorf("rdma_create_qp", syscall.EINVAL, "send and receive CQs must be rdmacore CQs")
	}
	c := attr.Cap
	if c.MaxSendWR < 1 || c.MaxRecvWR < 1 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 {
		return nil, verbs.Errorf("rdma_create_qp", syscall.EINVAL, "capabilities %+v out of range", c)
	}
	defer id.mu.Unlock()
	if !id.live() {
		return nil, verbs.ErrClosed
	}
	if id.qp != nil {
		return nil, verbs.Errorf("rdma_create_qp", syscall.EINVAL, "the ID already has a QP")
	}
	if err := id.needDevice("rdma_create_qp"); err != nil {
		return nil, err
	}
	qp, errno := rdmaCreateQP(id.p, p.p, scq.p, rcq.p, &c, attr.SignalAll)
	if errno != 0 {
		return nil, &verbs.Error{Op: "rdma_create_qp", Errno: errno}
	}
	q := &queuePair{p: qp, id: id, num: qpNum(qp), cap: c, sendCQ: scq, recvCQ: rcq}
	q.sendSlot = max(min(c.MaxSendWR, postChunk), 1)
	q.recvSlot = max(min(c.MaxRecvWR, postChunk), 1)
	q.send = allocSendScratch(q.sendSlot, c.MaxSendSGE)
	q.recv = allocRecvScratch(q.recvSlot, c.MaxRecvSGE)
	if q.send == nil || q.recv == nil {
		freeSendScratch(q.send)
		freeRecvScratch(q.recv)
		rdmaDestroyQP(id.p)
		return nil, verbs.Errorf("rdma_create_qp", syscall.ENOMEM, "allocating the posting arrays")
	}
	scq.attach(q)
	rcq.attach(q)
	id.qp = q
	return q, nil
}

// destroyQP is called by the QP's Destroy.
func (id *cmid) destroyQP(q *queuePair) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp != q {
		return verbs.ErrClosed
	}
	cmEventMu.Lock()
	errno := rdmaDestroyQP(id.p)
	cmEventMu.Unlock()
	if errno != 0 {
		return &verbs.Error{Op: "rdma_destroy_qp", Errno: errno}
	}
	id.qp = nil
	return nil
}

func (id *cmid) QP() verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qp == nil {
		return nil
	}
	return id.qp
}

func checkParam(op string, p *verbs.ConnParam, maxPD int) error {
	if len(p.PrivateData) > maxPD {
		return verbs.Errorf(op, syscall.EINVAL, "%d bytes of private data, at most %d", len(p.PrivateData), maxPD)
	}
	if p.RetryCount < 0 || p.RetryCount > 7 || p.RNRRetryCount < 0 || p.RNRRetryCount > 7 {
		return verbs.Errorf(op, syscall.EINVAL, "retry counts must be 0..7")
	}
	if p.ResponderResources < 0 || p.ResponderResources > 255 || p.InitiatorDepth < 0 || p.InitiatorDepth > 255 {
		return verbs.Errorf(op, syscall.EINVAL, "responder resources and initiator depth must be 0..255")
	}
	return nil
}

func (id *cmid) Connect(param *verbs.ConnParam) error {
	if param == nil {
		param = &verbs.ConnParam{}
	}
	if err := checkParam("rdma_connect", param, verbs.MaxPrivateDataConnect); err != nil {
		return err
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	if err := id.needDevice("rdma_connect"); err != nil {
		return err
	}
	return id.op("rdma_connect", rdmaConnect(id.p, param))
}

func (id *cmid) SetTOS(tos int) error {
	if tos < 0 || tos > verbs.MaxTOS {
		return verbs.Errorf("rdma_set_option", syscall.EINVAL, "type of service %d out of range [0, %d]", tos, verbs.MaxTOS)
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	return id.op("rdma_set_option", rdmaSetTOS(id.p, uint8(tos)))
}

func (id *cmid) SetAckTimeout(exp int) error {
	if exp < 0 || exp > verbs.MaxAckTimeout {
		return verbs.Errorf("rdma_set_option", syscall.EINVAL, "ACK timeout exponent %d out of range [0, %d]", exp, verbs.MaxAckTimeout)
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	return id.op("rdma_set_option", rdmaSetAckTimeout(id.p, uint8(exp)))
}

func (id *cmid) Accept(param *verbs.ConnParam) error {
	if param == nil {
		param = &verbs.ConnParam{}
	}
	if err := checkParam("rdma_accept", param, verbs.MaxPrivateDataAccept); err != nil {
		return err
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	if err := id.needDevice("rdma_accept"); err != nil {
		return err
	}
	return id.op("rdma_accept", rdmaAccept(id.p, param))
}

func (id *cmid) Reject(privateData []byte) error {
	if len(privateData) > verbs.MaxPrivateDataReject {
		return verbs.Errorf("rdma_reject", syscall.EINVAL, "%d bytes of private data, at most %d",
			len(privateData), verbs.MaxPrivateDataReject)
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	return id.op("rdma_reject", rdmaReject(id.p, privateData))
}

// Disconnect is rdma_disconnect: the QP moves to ERR (outstanding WRs
// flush) and the peer hears of it. Disconnecting twice is not an error.
func (id *cmid) Disconnect() error {
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	if id.disconnected {
		return nil
	}
	if err := id.needDevice("rdma_disconnect"); err != nil {
		return err
	}
	if err := id.op("rdma_disconnect", rdmaDisconnect(id.p)); err != nil {
		return err
	}
	id.disconnected = true
	return nil
}

// answerDisconnect runs when the peer disconnected. On the IB CM (and RoCE)
// librdmacm leaves the local QP in RTS and the peer waits for a DREP, which
// rdma_disconnect sends, before it reports its own DISCONNECTED: without an
// answer it waits for the DREQ to time out (about 100 s on rxe). The verbs
// contract has both sides hear of a disconnect and both QPs flush, so the
// provider answers for the application, as every librdmacm program does.
func (id *cmid) answerDisconnect() {
	defer id.mu.Unlock()
	if !id.live() || id.disconnected || idVerbs(id.p) == nil {
		return
	}
	if rdmaDisconnect(id.p) == 0 {
		id.disconnected = true
	}
}

// Migrate is rdma_migrate_id: future events of the ID arrive on ch.
func (id *cmid) Migrate(ch verbs.EventChannel) error {
	nc, ok := ch.(*eventChannel)
	if !ok || nc == nil {
		return verbs.Errorf("rdma_migrate_id", syscall.EINVAL, "event channel from another provider")
	}
	defer id.mu.Unlock()
	if !id.live() {
		return verbs.ErrClosed
	}
	if nc == id.ch {
		return nil
	}
	nc.mu.Lock()
	if nc.dead {
		nc.mu.Unlock()
		return verbs.ErrClosed
	}
	nc.nids++ // hold the new channel open across the call
	nc.mu.Unlock()
	if errno := rdmaMigrateID(id.p, nc.p); errno != 0 {
		nc.release()
		return &verbs.Error{Op: "rdma_migrate_id", Errno: errno}
	}
	old := id.ch
	id.ch = nc
	old.release()
	return nil
}

func (id *cmid) LocalAddr() *net.TCPAddr {
	defer id.mu.Unlock()
	if !id.live() {
		return nil
	}
	return rdmaGetLocalAddr(id.p)
}

func (id *cmid) RemoteAddr() *net.TCPAddr {
	defer id.mu.Unlock()
	if !id.live() {
		return nil
	}
	return rdmaGetPeerAddr(id.p)
}

// Destroy is rdma_destroy_id. The QP must be destroyed first (EBUSY).
func (id *cmid) Destroy() error {
	id.mu.Lock()
	if id.dead {
		id.mu.Unlock()
		return verbs.ErrClosed
	}
	if id.qp != nil {
		id.mu.Unlock()
		return verbs.Errorf("rdma_destroy_id", syscall.EBUSY, "destroy the ID's QP first")
	}
	id.dead = true
	id.mu.Unlock()
	ids.remove(id.p)
	// rdma_destroy_id waits until the ID's events are acknowledged; GetEvent
	// acknowledges every event before returning, so this does not block long.
	errno := rdmaDestroyID(id.p)
	id.ch.release()
	return id.op("rdma_destroy_id", errno)
}
