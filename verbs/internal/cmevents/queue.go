// Package cmevents is the Go side of a connection manager event channel,
// shared by the providers: events are pushed by whoever produces them (the
// soft provider's CM, rdmacore's pump over rdma_get_cm_event) and taken by
// EventChannel.GetEvent, which parks on a Go channel until an event, its
// deadline or Close.
package cmevents

import (
	"os"
	"sync"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// Queue is an unbounded FIFO of CM events with a blocking Get.
type Queue struct {
	mu     sync.Mutex
	q      []verbs.CMEvent
	wake   chan struct{} // a token while q is non-empty
	closed chan struct{}
	dead   bool
	notify func(verbs.CMEventType) // called by Push, under mu (Notify)
}

// New returns an empty, open queue.
func New() *Queue {
	return &Queue{wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Push appends ev; after Close it is dropped.
func (q *Queue) Push(ev verbs.CMEvent) {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return
	}
	q.q = append(q.q, ev)
	if q.notify != nil {
		q.notify(ev.Type)
	}
	q.mu.Unlock()
	q.signal()
}

// Notify makes Push call f with each event's type after queuing it (nil:
// stop). f runs with the queue locked, so that no call starts after
// Notify(nil) or Close returns: it must be quick and must not use the
// queue.
func (q *Queue) Notify(f func(verbs.CMEventType)) {
	q.mu.Lock()
	q.notify = f
	q.mu.Unlock()
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Get returns the oldest event, waiting until the deadline (zero: none):
// os.ErrDeadlineExceeded when it passes, verbs.ErrClosed once the queue is
// closed.
func (q *Queue) Get(deadline time.Time) (verbs.CMEvent, error) {
	var timer <-chan time.Time
	for {
		q.mu.Lock()
		if q.dead {
			q.mu.Unlock()
			return verbs.CMEvent{}, verbs.ErrClosed
		}
		if len(q.q) > 0 {
			ev := q.q[0]
			q.q[0] = verbs.CMEvent{}
			q.q = q.q[1:]
			if len(q.q) > 0 {
				q.signal() // pass the token on to the next waiter
			}
			q.mu.Unlock()
			return ev, nil
		}
		q.mu.Unlock()
		if !deadline.IsZero() && timer == nil {
			d := time.Until(deadline)
			if d <= 0 {
				return verbs.CMEvent{}, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-q.wake:
		case <-q.closed:
		case <-timer:
			return verbs.CMEvent{}, os.ErrDeadlineExceeded
		}
	}
}

// Close drops queued events and wakes every Get with verbs.ErrClosed. It
// reports false if the queue was already closed.
func (q *Queue) Close() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return false
	}
	q.dead = true
	q.q = nil
	q.notify = nil
	close(q.closed)
	return true
}

// Closed reports whether Close was called.
func (q *Queue) Closed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dead
}
