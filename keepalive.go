package rdma

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// A connection watches the connection manager's events and, between them,
// wakes for its timers (watch): the keepalive probe of an idle connection,
// the heartbeat's ticks, the peer's pings to answer. Where the event
// channel says when an event is queued (verbs.EventNotifier: soft's), a
// timer does it (timedWatch); else cmLoop, a goroutine waiting on the
// channel, does.

// startWatch starts the connection's watch.
func (c *Conn) startWatch() {
	if n, ok := c.ech.(verbs.EventNotifier); ok {
		c.startTimedWatch(n)
		return
	}
	c.cmDone = make(chan struct{})
	go c.cmLoop()
}

// stopWatch stops the watch; the event channel is closed. Once it
// returns, no tick runs.
func (c *Conn) stopWatch() {
	if t := c.timed; t != nil {
		t.timer.Stop()
		t.mu.Lock() // a run in progress ends first
		t.stopped = true
		t.mu.Unlock()
		return
	}
	if c.cmDone != nil {
		<-c.cmDone
	}
}

// cmLoop is the watch as a goroutine: it waits on the event channel, which
// parks on the runtime poller, until an event or the next tick.
func (c *Conn) cmLoop() {
	defer close(c.cmDone)
	w := c.newWatch(time.Now())
	for {
		ev, err := c.ech.GetEvent(w.next)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.tick(c, time.Now())
			continue
		}
		if err != nil {
			return
		}
		c.onEvent(ev)
	}
}

// onEvent handles a connection manager event of the established
// connection.
func (c *Conn) onEvent(ev verbs.CMEvent) {
	if actsOn(ev.Type) {
		// The QP is in error and its receives flush, which wakes the
		// poller; a probe makes sure of it even with none outstanding.
		c.mu.Lock()
		if !c.closed && !c.torn && !c.postProbeLocked() && !c.rx.FinRcvd {
			c.failLocked(errReset)
		}
		c.unlockSubmit()
	}
}

// actsOn reports whether the watch acts on an event of type t: the
// connection's end. The others (a soft listener's connection gets its
// EventEstablished once the peer's RTU arrives) are only taken.
func actsOn(t verbs.CMEventType) bool {
	return t == verbs.EventDisconnected || t == verbs.EventDeviceRemoval
}

// timedWatch is the watch run by a timer instead of a goroutine of its
// own: a parked goroutine's stack was the largest single part of what an
// idle soft connection holds, and fresh memory is a good part of what a
// connection's setup costs. The channel's notification resets the timer;
// a run takes the events queued, then ticks if one is due, then sets the
// timer to the next tick.
type timedWatch struct {
	mu      sync.Mutex // held by a run
	w       watch
	timer   *time.Timer
	events  atomic.Bool // an event it acts on was queued since a run last looked
	stopped bool
	runs    int // runs so far (for tests)
}

// eventDelay is how soon after an event it acts on is queued the watch
// runs. Those are disconnects, whose flushed receives already wake a Read
// or Write: it is a backstop, and need not start a goroutine beside the
// one reading the peer's last frames. Events it does not act on do not
// make it run (each run is a goroutine of the timer's, and each of a
// soft listener's connections gets an EventEstablished): they wait for
// its next run.
const eventDelay = time.Millisecond

func (c *Conn) startTimedWatch(n verbs.EventNotifier) {
	t := &timedWatch{w: c.newWatch(time.Now())}
	t.timer = time.AfterFunc(time.Hour, c.runWatch)
	t.timer.Stop()
	c.timed = t
	n.NotifyEvents(func(typ verbs.CMEventType) {
		if actsOn(typ) {
			t.events.Store(true)
			t.timer.Reset(eventDelay)
		}
	})
	// Events queued before the notification was set.
	t.mu.Lock()
	c.takeEvents()
	t.schedule()
	t.mu.Unlock()
}

// runWatch is a run of the timed watch: on the timer's goroutine.
func (c *Conn) runWatch() {
	t := c.timed
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.runs++
	t.events.Store(false)
	c.takeEvents()
	if now := time.Now(); !t.w.next.IsZero() && !now.Before(t.w.next) {
		t.w.tick(c, now)
	}
	t.schedule()
}

// schedule sets the timer for the next tick, or sooner if an event came
// meanwhile (a notification's Reset may have landed before this one).
// Called with mu held.
func (t *timedWatch) schedule() {
	if !t.w.next.IsZero() {
		t.timer.Reset(max(time.Until(t.w.next), 0))
	}
	if t.events.Load() {
		t.timer.Reset(eventDelay)
	}
}

// takeEvents handles the events queued, without waiting for more.
func (c *Conn) takeEvents() {
	for {
		ev, err := c.ech.GetEvent(time.Unix(1, 0))
		if err != nil {
			return
		}
		c.onEvent(ev)
	}
}

// keepalive probes the peer when no signaled send is outstanding (if one
// is, the transport's retry timeout already watches the peer). Unsignaled
// sends at the tail do not count: the transport may have delivered them long
// ago and watch nothing, and only a signaled WR behind them reports them.
//
// An idle connection's completions (an earlier probe's, say) wait in the
// CQ for the next Read or Write; the keepalive applies them first, when no
// caller holds the poll role, so that its view of the send queue is fresh.
func (c *Conn) keepalive() {
	c.tryPoll()
	c.mu.Lock()
	if !c.closed && !c.torn && c.err == nil && c.sqReserved == 0 && (c.sqPosted == c.sqDone || c.unsignaled > 0) {
		if c.postProbeLocked() {
			c.stats.keepalives++
		}
	}
	c.unlockSubmit()
}
