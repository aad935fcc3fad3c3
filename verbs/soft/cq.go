package soft

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// cq is a completion queue: a ring that producers (the QP engines) fill
// under mu and Poll drains into the caller's slice. It holds up to cqe
// completions, as created; the ring starts small and doubles up to that
// when completions pile up, so that an idle connection's CQ costs a few
// entries, not cqe of them.
type cq struct {
	ctx  *device
	ch   *compChannel
	mu   sync.Mutex
	ring []verbs.WC
	cqe  int // capacity: more queued is an overrun
	head int // next to poll
	n    int // queued
	// armed is the ReqNotify state: 0 none, 1 any completion, 2 solicited only.
	armed   int
	overrun bool
	qps     map[*qp]struct{} // QPs that complete here, for EBUSY and overrun
	dead    bool
}

func newCQ(c *device, cqe int, ch *compChannel) *cq {
	q := &cq{ctx: c, ch: ch, ring: make([]verbs.WC, min(cqe, cqStartSize)), cqe: cqe, qps: map[*qp]struct{}{}}
	if ch != nil {
		ch.attach(q)
	}
	return q
}

// push queues one completion. It reports false on overrun, after which the
// caller moves its QP to ERR; the other QPs feeding the CQ follow.
func (q *cq) push(wc *verbs.WC, solicited bool) bool {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return true
	}
	if q.n == len(q.ring) && len(q.ring) < q.cqe {
		q.grow()
	}
	if q.overrun || q.n == len(q.ring) {
		first := !q.overrun
		q.overrun = true
		var others []*qp
		if first {
			for p := range q.qps {
				others = append(others, p)
			}
		}
		q.mu.Unlock()
		if first && len(others) > 0 {
			// As on hardware (IBV_EVENT_CQ_ERR), every QP on the CQ is
			// unusable; move them to ERR outside our lock.
			go func() {
				for _, p := range others {
					p.fatal(verbs.WCWRFlushErr)
				}
			}()
		}
		return false
	}
	i := q.head + q.n
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	q.ring[i] = *wc
	q.n++
	notify := q.armed == 1 || (q.armed == 2 && (solicited || wc.Status != verbs.WCSuccess))
	if notify {
		q.armed = 0
	}
	q.mu.Unlock()
	if notify && q.ch != nil {
		q.ch.post(q)
	}
	return true
}

// cqStartSize is a CQ ring's first size.
const cqStartSize = 16

// grow doubles the ring (up to cqe), its queued completions first, in
// order. Called with mu held.
func (q *cq) grow() {
	r := make([]verbs.WC, min(2*len(q.ring), q.cqe))
	k := copy(r, q.ring[q.head:min(q.head+q.n, len(q.ring))])
	copy(r[k:q.n], q.ring)
	q.ring, q.head = r, 0
}

func (q *cq) Poll(wc []verbs.WC) (int, error) {
	q.mu.Lock()
	if q.overrun {
		q.mu.Unlock()
		return 0, verbs.ErrCQOverrun
	}
	k := min(len(wc), q.n)
	for i := 0; i < k; i++ {
		wc[i] = q.ring[q.head]
		q.head++
		if q.head == len(q.ring) {
			q.head = 0
		}
	}
	q.n -= k
	q.mu.Unlock()
	return k, nil
}

func (q *cq) ReqNotify(solicitedOnly bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if q.ch == nil {
		return verbs.Errorf("ibv_req_notify_cq", syscall.EINVAL, "CQ has no completion channel")
	}
	if solicitedOnly {
		if q.armed == 0 {
			q.armed = 2
		}
	} else {
		q.armed = 1
	}
	return nil
}

func (q *cq) Channel() verbs.CompChannel {
	if q.ch == nil {
		return nil
	}
	return q.ch
}

func (q *cq) Cap() int { return q.cqe }

func (q *cq) Destroy() error {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	if len(q.qps) > 0 {
		n := len(q.qps)
		q.mu.Unlock()
		return verbs.Errorf("ibv_destroy_cq", syscall.EBUSY, "%d QPs still use the CQ", n)
	}
	q.dead = true
	q.mu.Unlock()
	q.ctx.objs.Add(-1)
	if q.ch != nil {
		q.ch.detach(q) // outside q.mu: the channel's lock comes first
	}
	return nil
}

func (q *cq) addQP(p *qp) {
	q.mu.Lock()
	q.qps[p] = struct{}{}
	q.mu.Unlock()
	cqMembership.Add(1)
}

func (q *cq) removeQP(p *qp) {
	q.mu.Lock()
	delete(q.qps, p)
	q.mu.Unlock()
	cqMembership.Add(1)
}

// cqMembership counts the changes of which QPs feed which CQs, and which
// CQs a channel delivers for, in the whole process: a channel's soleQP
// answer holds as long as it has not moved. It moves after the change, so
// that an answer computed from a count read before the change is not
// taken for current.
var cqMembership atomic.Uint64

// compChannel delivers CQ events. Waiters park on a Go channel (no OS
// thread), or, when the channel's CQs are fed by a single connected QP,
// read that QP's transport themselves (see the receive role in engine.go).
// The queue of events is a slice reused once drained, so steady state
// allocates nothing.
type compChannel struct {
	ctx     *device
	mu      sync.Mutex
	events  []*cq
	head    int
	cqs     []*cq
	driving *qp // the QP a waiter is reading for, if any
	// sole is soleQP's last answer before its liveness check, computed
	// when cqMembership stood at soleAt (0: never): a waiter asks on every
	// GetEvent, and walking the CQs' QP sets each time cost a ping-pong's
	// waiter a map iteration a message.
	sole    *qp
	soleAt  uint64
	nEvents atomic.Int64
	wake    chan struct{} // capacity 1: "the queue may be non-empty"
	closed  chan struct{}
	dead    bool
	deadA   atomic.Bool

	// The deadline (SetDeadline): dlAt is when it passes, on monotime's
	// clock (0: none); dlTimer sets expired then. Guarded by mu; expired
	// is read without it by GetEvent's transport reader.
	dlAt    int64
	dlTimer *time.Timer
	expired atomic.Bool
}

func newCompChannel(c *device) *compChannel {
	return &compChannel{ctx: c, wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (c *compChannel) attach(q *cq) {
	c.mu.Lock()
	c.cqs = append(c.cqs, q)
	c.mu.Unlock()
	cqMembership.Add(1)
}

func (c *compChannel) detach(q *cq) {
	c.mu.Lock()
	for i, x := range c.cqs {
		if x == q {
			c.cqs = append(c.cqs[:i], c.cqs[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	cqMembership.Add(1)
}

func (c *compChannel) isDead() bool { return c.deadA.Load() }

// kick wakes a waiter to look again.
func (c *compChannel) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compChannel) post(q *cq) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.events = append(c.events, q)
	c.nEvents.Add(1)
	drv := c.driving
	c.mu.Unlock()
	c.wakeWaiter(drv)
}

// wakeWaiter wakes a GetEvent, whether it waits on the channel or reads
// drv's transport (drv: the QP it drives, or nil).
func (c *compChannel) wakeWaiter(drv *qp) {
	c.kick()
	if drv != nil && drv.rxRole.parked.Load() {
		// The waiter is blocked reading a transport for another reason.
		drv.tr.interrupt()
	}
}

// SetDeadline bounds GetEvent (see verbs.CompChannel).
func (c *compChannel) SetDeadline(t time.Time) error {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return verbs.ErrClosed
	}
	if c.dlTimer != nil {
		c.dlTimer.Stop()
	}
	if t.IsZero() {
		c.dlAt = 0
		c.expired.Store(false)
		c.mu.Unlock()
		return nil
	}
	if d := time.Until(t); d > 0 {
		c.dlAt = monotime() + int64(d)
		c.expired.Store(false)
		if c.dlTimer == nil {
			c.dlTimer = time.AfterFunc(d, c.onDeadline)
		} else {
			c.dlTimer.Reset(d)
		}
		c.mu.Unlock()
		return nil
	}
	c.dlAt = monotime()
	c.expired.Store(true)
	drv := c.driving
	c.mu.Unlock()
	c.wakeWaiter(drv)
	return nil
}

// onDeadline is dlTimer's: the deadline passed, unless it was moved since.
func (c *compChannel) onDeadline() {
	c.mu.Lock()
	if c.dead || c.dlAt == 0 || monotime() < c.dlAt {
		c.mu.Unlock()
		return
	}
	c.expired.Store(true)
	drv := c.driving
	c.mu.Unlock()
	c.wakeWaiter(drv)
}

// soleQP is the one running QP feeding all of c's CQs, or nil. Called with
// c.mu held.
func (c *compChannel) soleQP() *qp {
	if at := cqMembership.Load(); at != c.soleAt || at == 0 {
		c.sole, c.soleAt = c.feeder(), at
	}
	if c.sole == nil || !c.sole.rxRole.live.Load() {
		return nil
	}
	return c.sole
}

// feeder is the one QP feeding all of c's CQs, or nil. Called with c.mu
// held.
func (c *compChannel) feeder() *qp {
	var only *qp
	for _, q := range c.cqs {
		q.mu.Lock()
		for p := range q.qps {
			if only != nil && only != p {
				q.mu.Unlock()
				return nil
			}
			only = p
		}
		q.mu.Unlock()
	}
	return only
}

func (c *compChannel) GetEvent() (verbs.CQ, error) {
	cq, _, _, err := c.GetEventSpin(0)
	return cq, err
}

// GetEventSpin is GetEvent for a waiter that would rather poll than sleep
// for a short while. When it reads the transport itself (the channel's CQs
// are fed by one QP whose receive role is free), a read that finds no
// input polls the TCP connection for up to spin (as the process's spin
// limit allows: tcpTransport.polling) before it parks on the runtime's
// poller: input that comes within spin is seen without the
// kernel's wake-up of a sleeping thread and the scheduler's of a parked
// goroutine, which on a loopback connection cost more than the message.
// Shared memory's reader spins by its own rule and ignores spin. It
// returns the longest polling that input ended (polled) and how long the
// wait slept (parked, or waited on the channel); parked zero: polling
// caught all it waited for. rdma.Config.PollTime sets spin for a
// connection, and the connection's poll role learns from these how long
// to poll and when to stop (pollrole.go and poller.go in package rdma), which spares
// it reading the clock around every wait.
func (c *compChannel) GetEventSpin(spin time.Duration) (cq verbs.CQ, polled, parked time.Duration, err error) {
	// mu is held at the top of the loop: a drive that read the event
	// comes back to it under the lock it retook to clear driving, one
	// lock of mu fewer a wait than a fresh one.
	c.mu.Lock()
	for {
		if c.dead {
			c.mu.Unlock()
			return nil, polled, parked, verbs.ErrClosed
		}
		if c.expired.Load() {
			c.mu.Unlock()
			return nil, polled, parked, os.ErrDeadlineExceeded
		}
		if c.head < len(c.events) {
			q := c.events[c.head]
			c.events[c.head] = nil
			c.head++
			c.nEvents.Add(-1)
			if c.head == len(c.events) {
				c.head = 0
				c.events = c.events[:0]
			} else {
				c.kick() // others are queued: pass the wake-up on
			}
			c.mu.Unlock()
			return q, polled, parked, nil
		}
		p := c.soleQP()
		if p != nil && c.driving == nil {
			if p.rxRole.owner.CompareAndSwap(rxFree, rxApp) {
				c.driving = p
				c.mu.Unlock()
				pd, pk := p.drive(c, spin)
				polled, parked = max(polled, pd), parked+pk
				c.mu.Lock()
				c.driving = nil
				continue
			}
			if p.rxRole.owner.Load() == rxBackground {
				p.rxRole.want(c)
			}
		}
		c.mu.Unlock()
		var slept int64
		if spin > 0 {
			slept = monotime()
		}
		select {
		case <-c.wake:
		case <-c.closed:
		}
		if spin > 0 {
			parked += time.Duration(monotime() - slept)
		}
		c.mu.Lock()
	}
}

func (c *compChannel) AckEvents(verbs.CQ, int) {}

func (c *compChannel) Close() error {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return verbs.ErrClosed
	}
	// Unlike ibv_destroy_comp_channel, closing with CQs attached is allowed
	// (their events are dropped), so that Close always unblocks GetEvent.
	c.dead = true
	c.deadA.Store(true)
	close(c.closed)
	if c.dlTimer != nil {
		c.dlTimer.Stop()
	}
	c.ctx.objs.Add(-1)
	drv := c.driving
	c.mu.Unlock()
	if drv != nil && drv.rxRole.parked.Load() {
		drv.tr.interrupt()
	}
	return nil
}
