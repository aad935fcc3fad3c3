package rdma

import (
	"errors"
	"os"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// cmLoop watches the connection manager's events and, between them, wakes
// for the connection's timers (watch): the keepalive probe of an idle
// connection, the heartbeat's ticks, the peer's pings to answer. It waits
// on the event channel, which parks on the runtime poller.
func (c *Conn) cmLoop() {
	defer close(c.cmDone)
	w := c.newWatch(time.Now())
	for {
		ev, err := c.ech.GetEvent(w.next)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.tick(c, time.Now())
			continue
		}
		if err != nil {
			return
		}
		switch ev.Type {
		case verbs.EventDisconnected, verbs.EventDeviceRemoval:
			// The QP is in error and its receives flush, which wakes the
			// poller; a probe makes sure of it even with none outstanding.
			c.mu.Lock()
			if !c.closed && !c.torn && !c.postProbeLocked() && !c.rx.FinRcvd {
				c.failLocked(errReset)
			}
			c.unlockSubmit()
		}
	}
}

// keepalive probes the peer when no signaled send is outstanding (if one
// is, the transport's retry timeout already watches the peer). Unsignaled
// sends at the tail do not count: the transport may have delivered them long
// ago and watch nothing, and only a signaled WR behind them reports them.
//
// An idle connection's completions (an earlier probe's, say) wait in the
// CQ for the next Read or Write; the keepalive applies them first, when no
// caller holds the poll role, so that its view of the send queue is fresh.
func (c *Conn) keepalive() {
	c.tryPoll()
	c.mu.Lock()
	if !c.closed && !c.torn && c.err == nil && c.sqReserved == 0 && (c.sqPosted == c.sqDone || c.unsignaled > 0) {
		c.postProbeLocked()
	}
	c.unlockSubmit()
}
