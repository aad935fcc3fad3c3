// Package cmwatch is a connection's watch, for either wire: it takes the
// connection manager's events and, between them, wakes for the
// connection's timers, through a timer where the event channel says when
// an event is queued and through a goroutine of its own elsewhere.
package cmwatch

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// A connection of either wire watches the connection manager's events
// and, between them, wakes for its timers: the keepalive probe of an idle
// connection and, on rdma.Conn, the heartbeat's ticks and the peer's pings
// to answer (the root package's heartbeat.go). Where the event channel says when an event is
// queued (verbs.EventNotifier: soft's), a timer does it (timedWatch); else
// cmLoop, a goroutine waiting on the channel, does. What an event and a
// tick do is the connection's (Watcher).

// Watcher is a connection's side of its watch.
type Watcher interface {
	// OnEvent handles a connection manager event of the established
	// connection.
	OnEvent(ev verbs.CMEvent)
	// Tick runs a wake-up due at or before now and returns when the next
	// is due (zero: none).
	Tick(now time.Time) time.Time
}

// Watch is a started watch: its timer, or the channel that cmLoop closes
// as it ends. The zero Watch is none.
type Watch struct {
	timed *timedWatch
	done  chan struct{}
}

// Start starts the watch of w's connection, whose events come on ech and
// whose first tick is due at next (zero: none).
func Start(ech verbs.EventChannel, w Watcher, next time.Time) Watch {
	if n, ok := ech.(verbs.EventNotifier); ok {
		return Watch{timed: startTimedWatch(ech, n, w, next)}
	}
	done := make(chan struct{})
	go cmLoop(ech, w, next, done)
	return Watch{done: done}
}

// Stop stops the watch; the event channel is closed. Once it returns, no
// tick runs.
func (wt Watch) Stop() {
	if t := wt.timed; t != nil {
		t.timer.Stop()
		t.mu.Lock() // a run in progress ends first
		t.stopped = true
		t.mu.Unlock()
		return
	}
	if wt.done != nil {
		<-wt.done
	}
}

// Timed reports whether a timer runs the watch (no goroutine of its own).
func (wt Watch) Timed() bool { return wt.timed != nil }

// Runs is how many times the timer ran the watch so far (for tests).
func (wt Watch) Runs() int {
	wt.timed.mu.Lock()
	defer wt.timed.mu.Unlock()
	return wt.timed.runs
}

// cmLoop is the watch as a goroutine: it waits on the event channel, which
// parks on the runtime poller, until an event or the next tick.
func cmLoop(ech verbs.EventChannel, w Watcher, next time.Time, done chan struct{}) {
	defer close(done)
	for {
		ev, err := ech.GetEvent(next)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			next = w.Tick(time.Now())
			continue
		}
		if err != nil {
			return
		}
		w.OnEvent(ev)
	}
}

// ActsOn reports whether the watch acts on an event of type t: the
// connection's end. The others (a soft listener's connection gets its
// EventEstablished once the peer's RTU arrives) are only taken.
func ActsOn(t verbs.CMEventType) bool {
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
	ech     verbs.EventChannel
	w       Watcher
	next    time.Time // the next tick; zero: none
	timer   *time.Timer
	events  atomic.Bool // an event it acts on was queued since a run last looked
	stopped bool
	runs    int // runs so far (for tests)
}

// EventDelay is how soon after an event it acts on is queued the watch
// runs. Those are disconnects, whose flushed receives already wake a Read
// or Write: it is a backstop, and need not start a goroutine beside the
// one reading the peer's last frames. Events it does not act on do not
// make it run (each run is a goroutine of the timer's, and each of a
// soft listener's connections gets an EventEstablished): they wait for
// its next run.
const EventDelay = time.Millisecond

func startTimedWatch(ech verbs.EventChannel, n verbs.EventNotifier, w Watcher, next time.Time) *timedWatch {
	t := &timedWatch{ech: ech, w: w, next: next}
	t.timer = time.AfterFunc(time.Hour, t.run)
	t.timer.Stop()
	n.NotifyEvents(func(typ verbs.CMEventType) {
		if ActsOn(typ) {
			t.events.Store(true)
			t.timer.Reset(EventDelay)
		}
	})
	// Events queued before the notification was set.
	t.mu.Lock()
	t.takeEvents()
	t.schedule()
	t.mu.Unlock()
	return t
}

// run is a run of the timed watch: on the timer's goroutine.
func (t *timedWatch) run() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.runs++
	t.events.Store(false)
	t.takeEvents()
	if now := time.Now(); !t.next.IsZero() && !now.Before(t.next) {
		t.next = t.w.Tick(now)
	}
	t.schedule()
}

// schedule sets the timer for the next tick, or sooner if an event came
// meanwhile (a notification's Reset may have landed before this one).
// Called with mu held.
func (t *timedWatch) schedule() {
	if !t.next.IsZero() {
		t.timer.Reset(max(time.Until(t.next), 0))
	}
	if t.events.Load() {
		t.timer.Reset(EventDelay)
	}
}

// takeEvents handles the events queued, without waiting for more.
func (t *timedWatch) takeEvents() {
	for {
		ev, err := t.ech.GetEvent(time.Unix(1, 0))
		if err != nil {
			return
		}
		t.w.OnEvent(ev)
	}
}
