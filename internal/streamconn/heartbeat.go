package streamconn

import (
	"fmt"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Heartbeats (the rules are internal/stream's Liveness): a connection whose
// peer announced them pings the peer when it has been silent a while, and
// fails once it has been silent for PeerTimeout; every connection that
// announced them answers the peer's pings. The pings are counted and sent
// by the watch's ticks, off the data path: handle only counts the messages it
// applies and queues the pong a ping asks for, and a connection with
// traffic sends no pings.
//
// A ping reaches a peer whose program neither reads nor writes: the
// peer's watch applies its completions every time the peer asked for in
// the hello (the Heartbeat field), unless a Read or Write of the peer
// holds the poll role, and then that one applies them at once.

// watch is rdma.Conn's side of its watch (internal/cmwatch: cmLoop or a
// timer), with the timing of its ticks.
type watch struct {
	c       *Conn
	sched   cmwatch.Schedule
	probeAt time.Time // when the keepalive probe is due
	pinging bool      // the peer is held to PeerTimeout
	live    stream.Liveness
	moved   uint64 // stream bytes moved by the previous tick (queuegrowth.go)
	heard   uint64 // messages received when the keepalive was last due
}

// newWatch is the timing of a connection established at now: it wakes as
// often as the shortest of KeepAlive, the heartbeat's interval (if it
// pings) and the peer's answer time (if the peer pings).
func newWatch(c *Conn, now time.Time) *watch {
	w := &watch{c: c}
	var keepAlive, beat time.Duration
	if c.Cfg.KeepAlive > 0 {
		keepAlive = c.Cfg.KeepAlive
		w.probeAt = now.Add(c.Cfg.KeepAlive)
	}
	if c.RX.Pings && c.Cfg.PeerTimeout > 0 {
		w.pinging = true
		w.live = stream.NewLiveness(c.Cfg.PeerTimeout, now)
		beat = w.live.Interval()
	}
	w.sched = cmwatch.NewSchedule(now, c.peerBeat, keepAlive, beat)
	return w
}

// tick runs at each wake-up: it trims the queues of a connection that has
// gone quiet, applies what completions wait (so that a ping is answered
// and the messages received are counted), watches the peer, and probes if
// the keepalive is due.
//
// A tick that comes a whole period late says that this process did not run
// (stopped, starved): the peer's messages may wait unread, and whatever
// the peer's silence looks like is this side's own. The heartbeat's watch
// starts again from it (stream.Liveness), and the keepalive's probe waits
// a KeepAlive more: neither charges the pause to the peer.
func (w *watch) Tick(now time.Time) time.Time {
	c := w.c
	late := w.sched.Late(now)
	c.Growing().TrimIdle(&w.moved)
	c.TryPoll()
	if w.pinging {
		w.heartbeat(now)
	}
	if late && !w.probeAt.IsZero() {
		w.probeAt = now.Add(c.Cfg.KeepAlive)
		w.heardSince()
	}
	if !w.probeAt.IsZero() && !now.Before(w.probeAt) {
		// A peer heard from since the last probe was due is there: its
		// messages (a heartbeat's ping or pong, credits, data) say more
		// than a probe's acknowledgement would; and a ping just sent is
		// a signaled send the transport watches as it would a probe
		// (keepalive skips a busy queue). So an idle connection whose
		// heartbeat runs sends pings only, not probes as well.
		if !w.heardSince() {
			c.Keepalive()
		}
		w.probeAt = now.Add(c.Cfg.KeepAlive)
	}
	w.observeStats(now)
	return w.sched.Woke(now)
}

func (w *watch) OnEvent(ev verbs.CMEvent) { w.onEvent(ev) }

// heartbeat is a tick of the peer's watch: ping a silent peer, fail the
// connection when the peer has been silent for PeerTimeout.
//
// A peer declared unresponsive gets a disconnect, as a TCP connection
// whose user timeout passed is aborted: when its process runs again it
// finds its connection reset by this side (the verdict), and does not
// wait out a PeerTimeout of its own to blame this side, which answered
// all along.
func (w *watch) heartbeat(now time.Time) {
	c, l := w.c, &w.live
	c.Core.Mu.Lock()
	if c.Core.Closed || c.Core.Torn || c.Core.Err != nil {
		c.Core.Mu.Unlock()
		return
	}
	gaveUp := false
	switch l.Tick(now, c.Received) {
	case stream.PingDue:
		if c.send().controlLocked(stream.CtlPing) {
			l.Pinged()
			c.Core.Counters.PingsSent++
		}
	case stream.Unresponsive:
		c.FailLocked(UnresponsiveError(l.Timeout))
		gaveUp = true
	}
	c.send().unlockSubmit()
	if gaveUp {
		_ = c.EP.ID.Disconnect()
	}
}

// pongLocked queues the pong that a ping asked for, unless the send queue
// or the peer's receives are short (completions and credits retry it).
func (c sender) pongLocked() {
	if c.Core.Err == nil && !c.Core.Torn && c.controlLocked(stream.CtlPong) {
		c.pongDue = false
		c.Core.Counters.PongsSent++
	}
}

// controlLocked queues a heartbeat message if a queue slot and a message
// credit are free, keeping the last credit for a credit message, as data
// does. It is signaled, so that the idle connection it travels on keeps no
// unsignaled tail for the keepalive to probe.
func (c sender) controlLocked(code uint32) bool {
	if !c.CanSendData() {
		return false
	}
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(code), nil, c.TX.Addr, 0, true)
	c.TX.Spend()
	return true
}

// UnresponsiveError is the error of a connection whose peer was silent
// for d, though pinged.
func UnresponsiveError(d time.Duration) error {
	return &core.Error{Msg: fmt.Sprintf("peer unresponsive for %v", d), Errno: syscall.ETIMEDOUT}
}

// observeStats is the watch's look at the counters.
func (w *watch) observeStats(now time.Time) {
	c := w.c
	c.Core.Mu.Lock()
	c.Core.Counters.SeeLocked(now)
	c.Core.Mu.Unlock()
}
