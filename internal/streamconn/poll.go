package streamconn

import (
	"github.com/rdmanet/rdma/internal/core"
)

// Each wire's poll role is internal/core's Poller, over the connection's
// core state, its verbs endpoint and its PollState.

func (c *Conn) poller() core.Poller {
	return core.Poller{F: &c.Core, E: &c.EP, W: c}
}

// Await makes completions arrive (the poll role) for a caller that cannot
// go on; see core.Poller.Await.
func (c *Conn) Await(ready chan struct{}, dl *core.Deadline, draining bool) {
	c.poller().Await(ready, dl, draining)
}

// awaitRoom is await for a Write waiting for room; see
// core.Poller.AwaitRoom.
func (c *Conn) awaitRoom() { c.poller().AwaitRoom() }

// TryPoll applies the completions queued, unless the role is held; see
// core.Poller.TryPoll.
func (c *Conn) TryPoll() { c.poller().TryPoll() }
