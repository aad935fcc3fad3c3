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
	fireAt time.Time     // when timer runs; zero: it does not
	at     time.Time     // the deadline; zero: none
	cancel chan struct{} // closed when the deadline has passed
	// armed is whether at is set, written under mu: passed, which every
	// Read and Write asks, answers a connection without deadlines from it
	// alone, without mu.
	armed atomic.Bool
}

func MakeDeadline() Deadline { return Deadline{cancel: make(chan struct{})} }

// Set moves the deadline to t; the zero time means none. The deadline's
// one timer is made on first use and reset after: applications that set a
// deadline before every request (go-redis does, a read and a write
// deadline a command) allocate nothing, as with Go's net.Conn. A timer
// that fires for a deadline that has moved since finds it not passed
// (expire) and leaves it, or runs again for the new one; so Set leaves a
// running timer alone when it runs no later than t, and when the deadline
// is cleared or already passed, instead of stopping and resetting it each
// time. net/http's server moves a keep-alive connection's read deadline
// five times a request (the header's deadline, cleared, the background
// read's abort, cleared, cleared for the idle wait): 320-390 ns of timer
// updates a request against 215-220 with the timer left running
// (BenchmarkDeadlineHTTPRequest, 2-CPU host shared with other work).
//
// It reports whether a wait that honours the deadline may have to end
// sooner than it would have: t is set, and before the deadline it
// replaces or none was set. A deadline cleared or moved later needs no
// wake-up: a wait armed for the old one wakes then, finds it not passed
// and waits on.
func (d *Deadline) Set(t time.Time) (sooner bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sooner = !t.IsZero() && (d.at.IsZero() || t.Before(d.at))
	d.at = t
	d.armed.Store(!t.IsZero())
	closed := IsClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return sooner
	}
	dur := time.Until(t)
	if dur <= 0 { // passed already
		if !closed {
			close(d.cancel)
		}
		return sooner
	}
	if closed {
		d.cancel = make(chan struct{})
	}
	if !d.fireAt.IsZero() && !d.fireAt.After(t) {
		return sooner // the running timer comes first and then runs again for t
	}
	d.fireAt = t
	if d.timer == nil {
		d.timer = time.AfterFunc(dur, d.expire)
	} else {
		d.timer.Reset(dur)
	}
	return sooner
}

// expire is the timer's: it closes the channel if the deadline, as it is
// now, has passed, and else waits on for it (a deadline moved later, or
// a wall clock set back under a deadline without a monotonic reading).
func (d *Deadline) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fireAt = time.Time{}
	switch {
	case d.at.IsZero() || IsClosed(d.cancel):
	case !time.Now().Before(d.at):
		close(d.cancel)
	default:
		d.fireAt = d.at
		d.timer.Reset(time.Until(d.at))
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

// Passed reports whether the deadline has passed, by its timer (or by
// Set, for a time already past), as Go's net.Conn tells it: a Read or
// Write after the time but before the timer ran goes on as it would have
// a moment earlier, and a wait then ends when the timer runs. Reading the
// clock here instead cost every Read of a connection with a deadline a
// clock read and the lock (5% of a server's CPU with 64 connections on
// shared memory, rdmaperf -P 64).
func (d *Deadline) Passed() bool {
	if !d.armed.Load() {
		return false // no deadline, so cancel is open (set remade it)
	}
	return IsClosed(d.Wait())
}

// Stop releases the timer.
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.fireAt = time.Time{}
}

func IsClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
