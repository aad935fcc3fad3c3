package soft

import (
	"sync"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// cq is a completion queue: a fixed ring that producers (the QP engines)
// fill under mu and Poll drains into the caller's slice.
type cq struct {
	ctx  *device
	ch   *compChannel
	mu   sync.Mutex
	ring []verbs.WC
	head int // next to poll
	n    int // queued
	// armed is the ReqNotify state: 0 none, 1 any completion, 2 solicited only.
	armed   int
	overrun bool
	qps     map[*qp]struct{} // QPs that complete here, for EBUSY and overrun
	dead    bool
}

func newCQ(c *device, cqe int, ch *compChannel) *cq {
	q := &cq{ctx: c, ch: ch, ring: make([]verbs.WC, cqe), qps: map[*qp]struct{}{}}
	if ch != nil {
		ch.attach()
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

func (q *cq) Cap() int { return len(q.ring) }

func (q *cq) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if len(q.qps) > 0 {
		return verbs.Errorf("ibv_destroy_cq", syscall.EBUSY, "%d QPs still use the CQ", len(q.qps))
	}
	q.dead = true
	if q.ch != nil {
		q.ch.detach()
	}
	q.ctx.objs.Add(-1)
	return nil
}

func (q *cq) addQP(p *qp) {
	q.mu.Lock()
	q.qps[p] = struct{}{}
	q.mu.Unlock()
}

func (q *cq) removeQP(p *qp) {
	q.mu.Lock()
	delete(q.qps, p)
	q.mu.Unlock()
}

// compChannel delivers CQ events. Waiters park on a Go channel (no OS
// thread); the queue of events is a slice reused once drained, so steady
// state allocates nothing.
type compChannel struct {
	ctx    *device
	mu     sync.Mutex
	events []*cq
	head   int
	cqs    int
	wake   chan struct{} // capacity 1: "the queue may be non-empty"
	closed chan struct{}
	dead   bool
}

func newCompChannel(c *device) *compChannel {
	return &compChannel{ctx: c, wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (c *compChannel) attach() { c.mu.Lock(); c.cqs++; c.mu.Unlock() }
func (c *compChannel) detach() { c.mu.Lock(); c.cqs--; c.mu.Unlock() }

func (c *compChannel) post(q *cq) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.events = append(c.events, q)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compChannel) GetEvent() (verbs.CQ, error) {
	for {
		c.mu.Lock()
		if c.dead {
			c.mu.Unlock()
			return nil, verbs.ErrClosed
		}
		if c.head < len(c.events) {
			q := c.events[c.head]
			c.events[c.head] = nil
			c.head++
			if c.head == len(c.events) {
				c.head = 0
				c.events = c.events[:0]
			} else {
				// Others are queued: pass the wake-up on to the next waiter.
				select {
				case c.wake <- struct{}{}:
				default:
				}
			}
			c.mu.Unlock()
			return q, nil
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-c.closed:
		}
	}
}

func (c *compChannel) AckEvents(verbs.CQ, int) {}

func (c *compChannel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return verbs.ErrClosed
	}
	// Unlike ibv_destroy_comp_channel, closing with CQs attached is allowed
	// (their events are dropped), so that Close always unblocks GetEvent.
	c.dead = true
	close(c.closed)
	c.ctx.objs.Add(-1)
	return nil
}
