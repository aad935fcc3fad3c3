package stream

import "time"

// Heartbeats. A transport keeps a connection up as long as the peer's
// kernel or NIC acknowledges packets, which it goes on doing for a peer
// process that is stopped or wedged. So each side that wants to know may
// ask the peer's connection itself: when the peer has sent nothing for a
// while, it sends a CtlPing, which the peer's connection answers with a
// CtlPong; a peer that sends nothing at all for Timeout is declared
// unresponsive. Any message the peer sends (data, credit, control) counts
// as a sign of life, so a connection with traffic sends no pings.
//
// Only a peer that announced a version with heartbeats (VersionHeartbeat)
// is pinged or held to the timeout: a peer of version 1 would take a ping
// for a protocol breach, and never answers.
//
// Liveness is watched at ticks Interval apart (a fifth of Timeout), with
// the count of messages received so far; so the peer is declared
// unresponsive after between Timeout and Timeout plus one Interval of
// silence, never before Timeout. A healthy peer answers a ping within the
// Heartbeat it was told in the hello (Interval), so its answer is seen
// well within Timeout: the ping goes out within two Intervals of the last
// message, the answer comes within a third, the next tick sees it.

// Bounds of a heartbeat's timing, in whatever a peer announces too.
const (
	MinHeartbeat = 20 * time.Millisecond    // the shortest answer time honoured (a peer asking for less gets this)
	MaxHeartbeat = 65535 * time.Millisecond // what the hello's field holds
	MinTimeout   = 5 * MinHeartbeat         // the shortest Timeout
	heartbeats   = 5                        // ticks per Timeout
)

// Verdict is what a tick makes of the peer.
type Verdict uint8

const (
	Alive        Verdict = iota // heard from since the last tick, or not silent for long
	PingDue                     // silent for a tick: send a CtlPing (then call Pinged)
	Unresponsive                // silent for Timeout: the connection fails
)

// A tick that comes more than two Intervals (and lateFloor) after the
// previous one says that this side did not run meanwhile (its process was stopped or
// starved): the silence it sees is its own, and the peer's messages may
// still wait unread. Such a tick charges nothing to the peer: the watch
// starts again from it, as from a fresh connection, so that a peer that
// answers is heard before the next verdict, and a paused side that its
// peer gave up on learns that from the peer rather than blaming it.

// lateFloor is the least lateness taken for this side's own pause: with the
// shortest Timeouts, an Interval is as short as a timer's delay on a loaded
// host, which must not keep putting a silent peer's verdict off.
const lateFloor = 250 * time.Millisecond

// Liveness is one side's watch over its peer.
type Liveness struct {
	Timeout time.Duration
	heard   time.Time // the tick that first saw the latest message count
	count   uint64    // messages received, as of heard
	pinged  bool      // a ping went out since heard
	last    time.Time // the previous tick
}

// NewLiveness watches a peer for timeout (clamped to at least MinTimeout)
// from now, when the connection was established.
func NewLiveness(timeout time.Duration, now time.Time) Liveness {
	return Liveness{Timeout: max(timeout, MinTimeout), heard: now, last: now}
}

// Interval is how often Tick must run.
func (l *Liveness) Interval() time.Duration { return l.Timeout / heartbeats }

// Heartbeat is the hello's field: how soon, in milliseconds, the peer
// should answer a ping.
func (l *Liveness) Heartbeat() uint16 {
	return uint16(min(max(l.Interval(), MinHeartbeat), MaxHeartbeat) / time.Millisecond)
}

// Tick looks at the peer at now, given the count of messages received
// from it so far. Ticks are to come every Interval: one more than two
// Intervals (and lateFloor) after the previous is late, and sees the peer
// Alive.
func (l *Liveness) Tick(now time.Time, received uint64) Verdict {
	late := now.Sub(l.last) > max(2*l.Interval(), lateFloor)
	l.last = now
	if received != l.count || late {
		l.count, l.heard, l.pinged = received, now, false
		return Alive
	}
	silent := now.Sub(l.heard)
	switch {
	case silent >= l.Timeout:
		return Unresponsive
	case !l.pinged && silent >= l.Interval()/2:
		return PingDue
	}
	return Alive
}

// Pinged records that a ping went out; until the peer is heard from again,
// Tick asks for no other (the connection is reliable: one is enough).
func (l *Liveness) Pinged() { l.pinged = true }

// AnswerWithin is how often a side must look for pings from a peer that
// announced heartbeat h (0: the peer sends none), bounded by this side's
// limits whatever the peer asked for.
func AnswerWithin(h uint16) time.Duration {
	if h == 0 {
		return 0
	}
	return max(time.Duration(h)*time.Millisecond, MinHeartbeat)
}
