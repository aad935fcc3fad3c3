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
