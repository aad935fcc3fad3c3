package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// passed answers from the deadline's state through every move: none, in
// the past, cleared, in the future and then reached, moved again.
func TestDeadlinePassed(t *testing.T) {
	d := MakeDeadline()
	defer d.Stop()
	assert.False(t, d.Passed(), "no deadline")
	d.Set(time.Now().Add(-time.Second))
	assert.True(t, d.Passed(), "in the past")
	assert.True(t, IsClosed(d.Wait()))
	d.Set(time.Time{})
	assert.False(t, d.Passed(), "cleared")
	assert.False(t, IsClosed(d.Wait()))
	d.Set(time.Now().Add(30 * time.Millisecond))
	assert.False(t, d.Passed(), "in the future")
	<-d.Wait()
	assert.True(t, d.Passed(), "reached")
	d.Set(time.Now().Add(time.Hour))
	assert.False(t, d.Passed(), "moved an hour on")
	d.Set(time.Unix(1, 0))
	assert.True(t, d.Passed(), "moved into the past")
}

// Setting a deadline again and again, as an application that sets one a
// request does, allocates nothing once the timer exists; a timer that ran
// for a deadline moved since leaves the new one open, and the moved one
// still expires.
func TestDeadlineMovedKeepsOneTimer(t *testing.T) {
	d := MakeDeadline()
	defer d.Stop()
	d.Set(time.Now().Add(time.Hour))
	allocs := testing.AllocsPerRun(100, func() {
		d.Set(time.Now().Add(time.Hour))
	})
	assert.Zero(t, allocs, "a deadline moved allocates nothing")

	d.Set(time.Now().Add(time.Millisecond))
	time.Sleep(20 * time.Millisecond)
	assert.True(t, d.Passed(), "the timer ran")
	d.Set(time.Now().Add(time.Hour))
	assert.False(t, d.Passed(), "moved on: open again")

	d.Set(time.Now().Add(5 * time.Millisecond))
	d.Set(time.Now().Add(time.Hour))
	time.Sleep(30 * time.Millisecond)
	assert.False(t, d.Passed(), "the first time's timer does not close the moved deadline")
	d.Set(time.Now().Add(10 * time.Millisecond))
	select {
	case <-d.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline moved nearer never expired")
	}
}

// A deadline moved later, cleared or set in the past leaves the running
// timer as it is (no timer update on the path of an application that
// moves its deadline every request); the timer, run early, waits on for
// the deadline as it is then. Only a deadline nearer than the timer
// resets it.
func TestDeadlineTimerResetOnlyWhenNearer(t *testing.T) {
	d := MakeDeadline()
	defer d.Stop()
	first := time.Now().Add(time.Hour)
	d.Set(first)
	fireAt := func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.fireAt
	}
	assert.Equal(t, first, fireAt())
	d.Set(first.Add(time.Hour))
	assert.Equal(t, first, fireAt(), "moved later: the timer stays")
	d.Set(time.Time{})
	assert.Equal(t, first, fireAt(), "cleared: the timer stays")
	d.Set(time.Unix(1, 0))
	assert.True(t, d.Passed())
	assert.Equal(t, first, fireAt(), "passed: the timer stays")
	near := time.Now().Add(time.Minute)
	d.Set(near)
	assert.Equal(t, near, fireAt(), "nearer: reset")

	// The timer runs for the earlier time and then for the later one.
	start := time.Now()
	d.Set(start.Add(20 * time.Millisecond))
	d.Set(start.Add(80 * time.Millisecond))
	time.Sleep(50 * time.Millisecond)
	assert.False(t, d.Passed(), "the timer's earlier run leaves the moved deadline open")
	select {
	case <-d.Wait():
		assert.False(t, time.Now().Before(start.Add(80*time.Millisecond)), "closed before the deadline")
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline moved later never expired")
	}
}

// BenchmarkDeadlineHTTPRequest is the read deadline's moves of one
// net/http server request on a keep-alive connection (ReadHeaderTimeout
// set, no ReadTimeout or IdleTimeout): the header's deadline, cleared, the
// background read's abort (a time long past), cleared, cleared for the
// idle wait.
func BenchmarkDeadlineHTTPRequest(b *testing.B) {
	d := MakeDeadline()
	defer d.Stop()
	b.ReportAllocs()
	for b.Loop() {
		d.Set(time.Now().Add(30 * time.Second))
		d.Set(time.Time{})
		d.Set(time.Unix(1, 0))
		d.Set(time.Time{})
		d.Set(time.Time{})
	}
}

// Set says whether a wait honouring the deadline may have to end sooner:
// only a deadline set where none was, or moved earlier.
func TestDeadlineSetSooner(t *testing.T) {
	d := MakeDeadline()
	defer d.Stop()
	now := time.Now()
	assert.False(t, d.Set(time.Time{}), "none cleared")
	assert.True(t, d.Set(now.Add(time.Hour)), "set where none was")
	assert.False(t, d.Set(now.Add(2*time.Hour)), "moved later")
	assert.False(t, d.Set(now.Add(2*time.Hour)), "set again as it was")
	assert.True(t, d.Set(now.Add(time.Minute)), "moved earlier")
	assert.True(t, d.Set(time.Unix(1, 0)), "moved into the past")
	assert.False(t, d.Set(time.Time{}), "cleared")
}

// SetDeadlines wakes the poll role's holder (LookAgain) only for a
// deadline that comes sooner than the one it may sleep with: a deadline
// moved later or cleared, as go-redis, raft and net/http do around every
// request, leaves it asleep.
func TestSetDeadlinesWakesOnlyForSooner(t *testing.T) {
	var c Conn
	c.ClosedCh = make(chan struct{})
	c.ReadDL, c.WriteDL = MakeDeadline(), MakeDeadline()
	defer c.ReadDL.Stop()
	defer c.WriteDL.Stop()
	looks := 0
	c.LookAgain = func() { looks++ }
	now := time.Now()
	steps := []struct {
		name  string
		t     time.Time
		both  bool
		looks int
	}{
		{"read deadline set", now.Add(time.Hour), false, 1},
		{"read deadline later", now.Add(2 * time.Hour), false, 1},
		{"both set: the write deadline was none", now.Add(3 * time.Hour), true, 2},
		{"both later", now.Add(4 * time.Hour), true, 2},
		{"read deadline sooner", now.Add(time.Minute), false, 3},
		{"read deadline cleared", time.Time{}, false, 3},
		{"both cleared", time.Time{}, true, 3},
		{"both in the past", time.Unix(1, 0), true, 4},
	}
	for _, s := range steps {
		var b *Deadline
		if s.both {
			b = &c.WriteDL
		}
		require.NoError(t, c.SetDeadlines("set", s.t, &c.ReadDL, b))
		assert.Equal(t, s.looks, looks, s.name)
	}
}
