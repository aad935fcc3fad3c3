package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A peer that keeps sending is never pinged; one that falls silent is
// pinged once, at the first tick that finds it silent for half an
// interval, then declared unresponsive once silent for Timeout, not before.
func TestLivenessSilentPeer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(10*time.Second, t0)
	require.Equal(t, 2*time.Second, l.Interval())
	assert.Equal(t, uint16(2000), l.Heartbeat())

	now, count := t0, uint64(0)
	for i := 0; i < 20; i++ { // traffic: every tick sees new messages
		now, count = now.Add(l.Interval()), count+3
		require.Equal(t, Alive, l.Tick(now, count), "tick %d", i)
	}
	// Silence from the last tick that saw a message: one ping, then
	// nothing until Timeout has passed since that tick.
	heard := now
	pings := 0
	var v Verdict
	for v != Unresponsive {
		now = now.Add(l.Interval() / 3)
		v = l.Tick(now, count)
		if v == PingDue {
			pings++
			assert.GreaterOrEqual(t, now.Sub(heard), l.Interval()/2)
			l.Pinged()
		}
		if v == Unresponsive {
			assert.GreaterOrEqual(t, now.Sub(heard), l.Timeout, "declared unresponsive early")
			assert.Less(t, now.Sub(heard), l.Timeout+l.Interval())
		}
	}
	assert.Equal(t, 1, pings)
}

// The answer to a ping counts as a sign of life, and the next silence gets
// a ping of its own.
func TestLivenessAnswered(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(time.Second, t0)
	iv := l.Interval()
	assert.Equal(t, Alive, l.Tick(t0.Add(iv/4), 0))
	assert.Equal(t, PingDue, l.Tick(t0.Add(iv), 0))
	l.Pinged()
	assert.Equal(t, Alive, l.Tick(t0.Add(2*iv), 0), "one ping out: no other")
	assert.Equal(t, Alive, l.Tick(t0.Add(3*iv), 1), "the pong")
	assert.Equal(t, Alive, l.Tick(t0.Add(3*iv+iv/4), 1))
	assert.Equal(t, PingDue, l.Tick(t0.Add(4*iv), 1), "silent again: ping again")
	l.Pinged()
	assert.Equal(t, Alive, l.Tick(t0.Add(3*iv+l.Timeout-time.Nanosecond), 1))
	assert.Equal(t, Unresponsive, l.Tick(t0.Add(3*iv+l.Timeout), 1))
	// A message at the last moment saves it.
	assert.Equal(t, Alive, l.Tick(t0.Add(3*iv+l.Timeout), 2))
}

// Timeouts below MinTimeout are raised to it; the heartbeat announced stays
// within what the hello's field holds; what a peer announces is bounded
// here whatever it is.
func TestLivenessBounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(time.Millisecond, t0)
	assert.Equal(t, MinTimeout, l.Timeout)
	assert.Equal(t, uint16(MinHeartbeat/time.Millisecond), l.Heartbeat())
	l = NewLiveness(24*time.Hour, t0)
	assert.Equal(t, uint16(65535), l.Heartbeat())

	assert.Zero(t, AnswerWithin(0), "a peer that sends no pings needs no answers")
	assert.Equal(t, MinHeartbeat, AnswerWithin(1))
	assert.Equal(t, 2*time.Second, AnswerWithin(2000))
	assert.Equal(t, MaxHeartbeat, AnswerWithin(65535))
}

func TestLivenessZeroAllocs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(time.Second, t0)
	n := uint64(0)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		n++
		t0 = t0.Add(time.Millisecond)
		if l.Tick(t0, n/4) == PingDue {
			l.Pinged()
		}
	}))
}
