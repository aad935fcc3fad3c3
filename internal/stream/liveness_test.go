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
	for at := 5 * iv; at < 3*iv+l.Timeout; at += iv {
		assert.Equal(t, Alive, l.Tick(t0.Add(at), 1))
	}
	assert.Equal(t, Alive, l.Tick(t0.Add(3*iv+l.Timeout-time.Nanosecond), 1))
	assert.Equal(t, Unresponsive, l.Tick(t0.Add(3*iv+l.Timeout), 1))
	// A message at the last moment saves it.
	assert.Equal(t, Alive, l.Tick(t0.Add(3*iv+l.Timeout), 2))
}

// A tick that comes late (this side did not run: stopped, starved) charges
// its own pause to nobody: the peer is Alive at it and gets a whole Timeout
// from it; ticks on time then find a peer that stays silent as before.
func TestLivenessLateTick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(time.Second, t0)
	iv := l.Interval()
	assert.Equal(t, Alive, l.Tick(t0.Add(iv/4), 0))
	resumed := t0.Add(10 * time.Second) // stopped for ten Timeouts
	assert.Equal(t, Alive, l.Tick(resumed, 0), "a late tick blamed the peer for this side's pause")
	assert.Equal(t, PingDue, l.Tick(resumed.Add(iv), 0))
	l.Pinged()
	at := resumed.Add(iv)
	for ; at.Sub(resumed) < l.Timeout; at = at.Add(iv) {
		assert.Equal(t, Alive, l.Tick(at, 0))
	}
	assert.Equal(t, Unresponsive, l.Tick(at, 0))
	// Two Intervals after the previous tick is not late; a nanosecond
	// more is.
	l = NewLiveness(time.Second, t0)
	assert.Equal(t, PingDue, l.Tick(t0.Add(2*iv), 0))
	assert.Equal(t, Alive, l.Tick(t0.Add(4*iv+1), 0))
	// With the shortest Timeout, lateness is at least lateFloor: a timer
	// a few Intervals late on a loaded host does not put the verdict off.
	l = NewLiveness(MinTimeout, t0)
	iv = l.Interval()
	require.Less(t, 2*iv, lateFloor)
	at = t0
	for ; at.Sub(t0) < MinTimeout; at = at.Add(lateFloor) {
		l.Tick(at, 0)
	}
	assert.Equal(t, Unresponsive, l.Tick(at, 0))
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

// FuzzLiveness runs a watch over a peer through a sequence of ticks, and
// holds every verdict to the rules: a tick that sees a new message count
// finds the peer alive; a peer silent (since the tick that first saw its
// latest count) for Timeout is unresponsive, and never before; one silent
// for half an Interval is pinged, once, until it is heard from again
// (whether or not the ping could go out: only Pinged counts). So, with
// ticks an Interval apart, unresponsive comes between Timeout and Timeout
// plus one Interval of silence. And whatever a peer announces, the answer
// time taken from it stays within this side's bounds.
//
// timeoutMs is the Timeout asked for; each pair of bytes of events is a
// tick: the time since the last tick, in sixteenths of an Interval, plus
// up to 31 ns; how many messages arrived since (0 to 3); and whether a
// ping asked for goes out.
func FuzzLiveness(f *testing.F) {
	tick := func(sixteenths, msgs byte, sent bool, ns byte) []byte {
		b := msgs&3 | ns<<3
		if sent {
			b |= 4
		}
		return []byte{sixteenths, b}
	}
	steady := func(sixteenths byte, n int, msgs byte, sent bool) []byte {
		var b []byte
		for range n {
			b = append(b, tick(sixteenths, msgs, sent, 0)...)
		}
		return b
	}
	f.Add(uint32(10000), uint16(2000), steady(16, 30, 1, true))                                   // traffic: never pinged
	f.Add(uint32(10000), uint16(2000), append(steady(16, 3, 1, true), steady(16, 8, 0, true)...)) // falls silent
	f.Add(uint32(1000), uint16(0), append(steady(8, 3, 0, false), steady(5, 20, 0, true)...))     // pings that cannot go out
	f.Add(uint32(1), uint16(1), steady(4, 30, 0, true))                                           // below MinTimeout
	f.Add(uint32(86400000), uint16(65535), append(steady(15, 6, 0, true), tick(16, 1, true, 3)...))
	f.Add(uint32(100), uint16(20), append(steady(0, 4, 0, true), steady(255, 2, 0, true)...)) // ticks at once, then late
	f.Fuzz(func(t *testing.T, timeoutMs uint32, heartbeat uint16, events []byte) {
		if a := AnswerWithin(heartbeat); heartbeat == 0 && a != 0 || heartbeat != 0 && (a < MinHeartbeat || a > MaxHeartbeat) {
			t.Fatalf("AnswerWithin(%d) = %v", heartbeat, a)
		}
		t0 := time.Unix(1000, 0)
		l := NewLiveness(time.Duration(timeoutMs)*time.Millisecond, t0)
		iv := l.Interval()
		if l.Timeout < MinTimeout || l.Timeout < time.Duration(timeoutMs)*time.Millisecond || iv <= 0 || iv > l.Timeout {
			t.Fatalf("Timeout %v, Interval %v for %d ms", l.Timeout, iv, timeoutMs)
		}
		if hb := time.Duration(l.Heartbeat()) * time.Millisecond; hb < MinHeartbeat || hb > MaxHeartbeat {
			t.Fatalf("Heartbeat %v", hb)
		}
		// The model: when the latest count was first seen, and whether a
		// ping went out since.
		now, count := t0, uint64(0)
		heard, pinged := t0, false
		for ; len(events) >= 2; events = events[2:] {
			prev := now
			now = now.Add(time.Duration(events[0])*(iv/16) + time.Duration(events[1]>>3))
			count += uint64(events[1] & 3)
			v := l.Tick(now, count)
			if count != l.count {
				t.Fatalf("tick at count %d left the watch at %d", count, l.count)
			}
			if late := now.Sub(prev) > max(2*iv, lateFloor); events[1]&3 != 0 || late {
				heard, pinged = now, false
				if v != Alive {
					t.Fatalf("a tick that saw new messages or came late (%v): verdict %d", late, v)
				}
				continue
			}
			silent := now.Sub(heard)
			want := Alive
			switch {
			case silent >= l.Timeout:
				want = Unresponsive
			case !pinged && silent >= iv/2:
				want = PingDue
			}
			if v != want {
				t.Fatalf("silent %v (Timeout %v, Interval %v, pinged %v): verdict %d, want %d", silent, l.Timeout, iv, pinged, v, want)
			}
			if v == PingDue && events[1]&4 != 0 {
				l.Pinged()
				pinged = true
			}
		}
	})
}
