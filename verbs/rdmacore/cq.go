//go:build cgo && linux

package rdmacore

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// compChannel is a verbs.CompChannel whose descriptor parks waiters on Go's
// runtime poller.
type compChannel struct {
	p   compChPtr
	ctx ctxPtr
	w   *fdWaiter
	dw  *directWaiter // the direct wait (directwait_linux.go), before w's
	out cqEvOutPtr    // C out-parameters of ibv_get_cq_event

	// getMu serialises GetEvent: try and its results below are shared.
	getMu  sync.Mutex
	try    func(uintptr) bool // c.tryGet, bound once so that waiting allocates nothing
	gotCQ  cqPtr
	gotErr syscall.Errno

	mu     sync.Mutex
	cqs    map[cqPtr]*cq // CQs attached to the channel
	closed atomic.Bool
}

var _ verbs.CompChannel = (*compChannel)(nil)

func newCompChannel(ctx ctxPtr) (*compChannel, error) {
	p, fd, errno := ibvCreateCompChannel(ctx)
	if errno != 0 {
		return nil, &verbs.Error{Op: "ibv_create_comp_channel", Errno: errno}
	}
	newWaiter := newOnDemandFDWaiter
	if directSlots == 0 {
		newWaiter = newFDWaiter // every wait is on the poller: stay there
	}
	w, err := newWaiter(fd, "ibv_comp_channel")
	if err != nil {
		ibvDestroyCompChannel(p)
		return nil, err
	}
	dw, err := newDirectWaiter(w.fd)
	if err != nil {
		w.close()
		ibvDestroyCompChannel(p)
		return nil, err
	}
	c := &compChannel{p: p, ctx: ctx, w: w, dw: dw, out: allocCQEventOut(), cqs: map[cqPtr]*cq{}}
	c.try = c.tryGet
	return c, nil
}

func (c *compChannel) tryGet(uintptr) bool {
	c.gotCQ, c.gotErr = ibvGetCQEvent(c.p, c.out)
	return c.gotErr != syscall.EAGAIN
}

// GetEvent waits for a CQ event and returns the CQ that produced it.
func (c *compChannel) GetEvent() (verbs.CQ, error) {
	c.getMu.Lock()
	defer c.getMu.Unlock()
	for {
		if c.closed.Load() {
			return nil, verbs.ErrClosed
		}
		if err := c.wait(); err != nil {
			return nil, err
		}
		if c.gotErr != 0 {
			return nil, &verbs.Error{Op: "ibv_get_cq_event", Errno: c.gotErr}
		}
		c.mu.Lock()
		q := c.cqs[c.gotCQ]
		c.mu.Unlock()
		if q == nil {
			// The CQ is being destroyed, and its ibv_destroy_cq waits for this
			// event's acknowledgement: give it.
			ibvAckCQEvents(c.gotCQ, 1)
			continue
		}
		q.unacked.Add(1)
		return q, nil
	}
}

// wait waits until tryGet has an event: a direct wait first, if a slot is
// free, then on the runtime poller.
func (c *compChannel) wait() error {
	if takeDirectSlot() {
		// Off the poller while this thread waits itself (fdWaiter).
		c.w.leavePoller()
		done, err := c.dw.wait(c.try)
		giveDirectSlot()
		if done {
			return err
		}
	}
	return c.w.wait(c.try)
}

// SetDeadline bounds GetEvent: the channel's descriptor is on the runtime
// poller, so this is its read deadline, and a deadline in the past wakes a
// pending GetEvent at once without a system call (a direct wait is woken
// through its eventfd: one write).
func (c *compChannel) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return verbs.ErrClosed
	}
	c.dw.setDeadline(t)
	if err := c.w.setDeadline(t); err != nil {
		if c.closed.Load() {
			return verbs.ErrClosed
		}
		return err
	}
	return nil
}

// AckEvents is ibv_ack_cq_events. Acknowledging more events than were
// delivered would make the CQ's destroy wait forever, so the excess is ignored.
func (c *compChannel) AckEvents(ev verbs.CQ, n int) {
	q, ok := ev.(*cq)
	if !ok || n <= 0 {
		return
	}
	q.ack(n)
}

// Close destroys the channel; it fails with EBUSY while CQs use it, as
// ibv_destroy_comp_channel does. A pending GetEvent returns ErrClosed.
func (c *compChannel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return verbs.ErrClosed
	}
	if len(c.cqs) > 0 {
		return verbs.Errorf("ibv_destroy_comp_channel", syscall.EBUSY, "%d CQs still use the channel", len(c.cqs))
	}
	c.closed.Store(true)
	c.dw.close() // waits until no direct waiter is inside ibv_get_cq_event
	c.w.close()  // and no waiter on the poller
	c.getMu.Lock()
	defer c.getMu.Unlock()
	errno := ibvDestroyCompChannel(c.p)
	freeCQEventOut(c.out)
	if errno != 0 {
		return &verbs.Error{Op: "ibv_destroy_comp_channel", Errno: errno}
	}
	return nil
}

// pollChunk is the size of a CQ's C array of ibv_wc: Poll moves completions
// through it this many at a time.
const pollChunk = 32

// cq is a verbs.CQ.
type cq struct {
	p     cqPtr
	ctx   ctxPtr
	ch    *compChannel
	cap   int
	mu    sync.Mutex // guards wcs and dead
	wcs   wcArrayPtr
	dead  bool
	users atomic.Int32 // QPs using the CQ
	qpsMu sync.Mutex
	qps   map[*queuePair]struct{} // the QPs that complete here
	// overrun is set by the device's asynchronous event reader when the CQ
	// overflowed (IBV_EVENT_CQ_ERR).
	overrun atomic.Bool

	unacked atomic.Int64 // events delivered by GetEvent and not yet acknowledged
	ackMu   sync.Mutex
}

var _ verbs.CQ = (*cq)(nil)

func newCQ(ctx ctxPtr, cqe int, ch verbs.CompChannel) (*cq, error) {
	if cqe < 1 {
		return nil, verbs.Errorf("ibv_create_cq", syscall.EINVAL, "cqe %d must be positive", cqe)
	}
	var cc *compChannel
	var chp compChPtr
	if ch != nil {
		var ok bool
		if cc, ok = ch.(*compChannel); !ok {
			return nil, verbs.Errorf("ibv_create_cq", syscall.EINVAL, "completion channel from another provider")
		}
		if cc.ctx != ctx {
			return nil, verbs.Errorf("ibv_create_cq", syscall.EINVAL, "completion channel of another device")
		}
		cc.mu.Lock()
		defer cc.mu.Unlock()
		if cc.closed.Load() {
			return nil, verbs.ErrClosed
		}
		chp = cc.p
	}
	p, n, errno := ibvCreateCQ(ctx, cqe, chp)
	if errno != 0 {
		return nil, &verbs.Error{Op: "ibv_create_cq", Errno: errno}
	}
	q := &cq{p: p, ctx: ctx, ch: cc, cap: n, wcs: allocWCArray(pollChunk), qps: map[*queuePair]struct{}{}}
	if cc != nil {
		cc.cqs[p] = q
	}
	watchCQ(q)
	return q, nil
}

// Poll moves up to len(wc) completions into wc. It allocates nothing. (No
// defer: a busy-polling caller runs this in a tight loop.)
func (q *cq) Poll(wc []verbs.WC) (int, error) {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return 0, verbs.ErrClosed
	}
	if q.overrun.Load() {
		q.mu.Unlock()
		return 0, verbs.ErrCQOverrun
	}
	total := 0
	for total < len(wc) {
		want := min(len(wc)-total, pollChunk)
		n, errno := ibvPollCQ(q.p, q.wcs, wc[total:total+want])
		if errno != 0 {
			q.mu.Unlock()
			return total, &verbs.Error{Op: "ibv_poll_cq", Errno: errno}
		}
		total += n
		if n < want {
			break
		}
	}
	q.mu.Unlock()
	return total, nil
}

func (q *cq) ReqNotify(solicitedOnly bool) error {
	if errno := ibvReqNotifyCQ(q.p, solicitedOnly); errno != 0 {
		return &verbs.Error{Op: "ibv_req_notify_cq", Errno: errno}
	}
	return nil
}

func (q *cq) Channel() verbs.CompChannel {
	if q.ch == nil {
		return nil
	}
	return q.ch
}

func (q *cq) Cap() int { return q.cap }

func (q *cq) attach(p *queuePair) {
	q.users.Add(1)
	q.qpsMu.Lock()
	q.qps[p] = struct{}{}
	q.qpsMu.Unlock()
}

func (q *cq) detach(p *queuePair) {
	q.qpsMu.Lock()
	delete(q.qps, p)
	q.qpsMu.Unlock()
	q.users.Add(-1)
}

// overflowed is called by the device's event reader on IBV_EVENT_CQ_ERR.
// Some devices (rxe) merely drop the completions that did not fit, so the
// QPs feeding the CQ are moved to ERR here, as hardware does.
func (q *cq) overflowed() {
	q.overrun.Store(true)
	q.qpsMu.Lock()
	qps := slices.Collect(maps.Keys(q.qps))
	q.qpsMu.Unlock()
	for _, p := range qps {
		p.toError()
	}
}

func (q *cq) ack(n int) {
	q.ackMu.Lock()
	defer q.ackMu.Unlock()
	n = int(min(int64(n), q.unacked.Load()))
	if n > 0 {
		ibvAckCQEvents(q.p, n)
		q.unacked.Add(int64(-n))
	}
}

// Destroy is ibv_destroy_cq. Events still unacknowledged are acknowledged
// first: ibv_destroy_cq would otherwise wait for them forever.
func (q *cq) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if n := q.users.Load(); n > 0 {
		return verbs.Errorf("ibv_destroy_cq", syscall.EBUSY, "%d QPs still use the CQ", n)
	}
	if q.ch != nil {
		// Stop GetEvent from handing out this CQ before its events are counted.
		q.ch.mu.Lock()
		delete(q.ch.cqs, q.p)
		q.ch.mu.Unlock()
	}
	q.ack(int(q.unacked.Load()))
	if errno := ibvDestroyCQ(q.p); errno != 0 {
		if q.ch != nil {
			q.ch.mu.Lock()
			q.ch.cqs[q.p] = q
			q.ch.mu.Unlock()
		}
		return &verbs.Error{Op: "ibv_destroy_cq", Errno: errno}
	}
	q.dead = true
	freeWCArray(q.wcs)
	unwatchCQ(q)
	return nil
}
