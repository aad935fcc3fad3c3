package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
