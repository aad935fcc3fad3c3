package rdma

import (
	"sync"
	"sync/atomic"
	"time"
)

// deadline is one direction's deadline, modelled on net.Pipe's: a channel
// that is closed once the deadline passes, remade when the deadline is moved.
// Waiting on it allocates nothing; only SetDeadline does.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	at     time.Time     // the deadline; zero: none
	cancel chan struct{} // closed when the deadline has passed
	// armed is whether at is set, written under mu: passed, which every
	// Read and Write asks, answers a connection without deadlines from it
	// alone, without mu.
	armed atomic.Bool
}

func makeDeadline() deadline { return deadline{cancel: make(chan struct{})} }

// set moves the deadline to t; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired; wait for its close to be visible
	}
	d.timer = nil
	d.at = t
	d.armed.Store(!t.IsZero())
	closed := isClosed(d.cancel)
	dur := time.Until(t)
	if !t.IsZero() && dur <= 0 { // passed already
		if !closed {
			close(d.cancel)
		}
		return
	}
	if closed {
		d.cancel = make(chan struct{})
	}
	if !t.IsZero() {
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
	}
}

// wait returns a channel that is closed once the deadline has passed.
func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

// state returns the channel wait returns, and the deadline's time (zero:
// none), in one look.
func (d *deadline) state() (chan struct{}, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel, d.at
}

// passed reports whether the deadline has passed, by the clock as well as
// by its timer (which may not have run yet).
func (d *deadline) passed() bool {
	if !d.armed.Load() {
		return false // no deadline, so cancel is open (set remade it)
	}
	ch, at := d.state()
	return isClosed(ch) || !at.IsZero() && !time.Now().Before(at)
}

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
