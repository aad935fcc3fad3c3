package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// Deadline is one direction's Deadline, modelled on net.Pipe's: a channel
// that is closed once the Deadline passes, remade when the Deadline is moved.
// Waiting on it allocates nothing; only SetDeadline does.
type Deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	at     time.Time     // the deadline; zero: none
	cancel chan struct{} // closed when the deadline has passed
	// armed is whether at is set, written under mu: passed, which every
	// Read and Write asks, answers a connection without deadlines from it
	// alone, without mu.
	armed atomic.Bool
}

func MakeDeadline() Deadline { return Deadline{cancel: make(chan struct{})} }

// Set moves the deadline to t; the zero time means none.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired; wait for its close to be visible
	}
	d.timer = nil
	d.at = t
	d.armed.Store(!t.IsZero())
	closed := IsClosed(d.cancel)
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

// Wait returns a channel that is closed once the deadline has passed.
func (d *Deadline) Wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

// State returns the channel wait returns, and the deadline's time (zero:
// none), in one look.
func (d *Deadline) State() (chan struct{}, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel, d.at
}

// Passed reports whether the deadline has Passed, by the clock as well as
// by its timer (which may not have run yet).
func (d *Deadline) Passed() bool {
	if !d.armed.Load() {
		return false // no deadline, so cancel is open (set remade it)
	}
	ch, at := d.State()
	return IsClosed(ch) || !at.IsZero() && !time.Now().Before(at)
}

// Stop releases the timer.
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

func IsClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
