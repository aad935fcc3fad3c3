package streamconn

import (
	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/verbs"
)

// The watch itself (internal/cmwatch) takes the connection manager's
// events and wakes for the timers; here is what rdma.Conn does with them.

// onEvent handles a connection manager event of the established
// connection.
func (w *watch) onEvent(ev verbs.CMEvent) {
	c := w.c
	if cmwatch.ActsOn(ev.Type) {
		// The QP is in error and its receives flush, which wakes the
		// poller; a probe makes sure of it even with none outstanding.
		c.Core.Mu.Lock()
		if !c.Core.Closed && !c.Core.Torn && !c.send().postProbeLocked() && !c.RX.FinRcvd {
			c.FailLocked(core.ErrReset)
		}
		c.send().unlockSubmit()
	}
}

// heardSince reports whether a message came from the peer since the
// count in heard was taken, and takes it again.
func (w *watch) heardSince() bool {
	c, seen := w.c, &w.heard
	c.Core.Mu.Lock()
	r := c.Received
	c.Core.Mu.Unlock()
	heard := r != *seen
	*seen = r
	return heard
}

// Keepalive probes the peer when no signaled send is outstanding (if one
// is, the transport's retry timeout already watches the peer). Unsignaled
// sends at the tail do not count: the transport may have delivered them long
// ago and watch nothing, and only a signaled WR behind them reports them.
//
// An idle connection's completions (an earlier probe's, say) wait in the
// CQ for the next Read or Write; the watch's tick applies them first, when
// no caller holds the poll role, so that the keepalive's view of the send
// queue is fresh.
func (c *Conn) Keepalive() {
	c.Core.Mu.Lock()
	if !c.Core.Closed && !c.Core.Torn && c.Core.Err == nil && c.SQ.ProbeDue() {
		if c.send().postProbeLocked() {
			c.Core.Counters.Keepalives++
		}
	}
	c.send().unlockSubmit()
}
