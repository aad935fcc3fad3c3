package rdma

import (
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/verbs"
)

// Each wire's poll role is internal/core's Poller, over the connection's
// core state, its verbs endpoint and its PollState.

func (c *Conn) poller() core.Poller {
	return core.Poller{F: &c.core, E: &c.ep, W: (*polledConn)(c)}
}

// await makes completions arrive (the poll role) for a caller that cannot
// go on; see core.Poller.Await.
func (c *Conn) await(ready chan struct{}, dl *core.Deadline, draining bool) {
	c.poller().Await(ready, dl, draining)
}

// awaitRoom is await for a Write waiting for room; see
// core.Poller.AwaitRoom.
func (c *Conn) awaitRoom() { c.poller().AwaitRoom() }

// tryPoll applies the completions queued, unless the role is held; see
// core.Poller.TryPoll.
func (c *Conn) tryPoll() { c.poller().TryPoll() }

// polledConn and polledRsocket are each wire as its poll role sees it
// (core.PolledConn): the same connection, with the two steps the role
// asks for under exported names that stay out of the public types'
// method sets.
type (
	polledConn    Conn
	polledRsocket RsocketConn
)

func (p *polledConn) Handle(wcs []verbs.WC)    { (*Conn)(p).handle(wcs) }
func (p *polledConn) FailLocked(err error)     { (*Conn)(p).failLocked(err) }
func (p *polledRsocket) Handle(wcs []verbs.WC) { (*RsocketConn)(p).handle(wcs) }
func (p *polledRsocket) FailLocked(err error)  { (*RsocketConn)(p).failLocked(err) }
