package rdma

import (
	"time"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/verbs"
)

// Each wire's poll role is internal/core's Poller, over the connection's
// core state, its verbs endpoint and its PollState.

func (c *Conn) poller() core.Poller {
	return core.Poller{F: &c.core, E: &c.ep, W: (*connCore)(c)}
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

// connCore is the wire as internal/core sees it (its poll role,
// core.PolledConn; Close, core.ClosingWire; CloseWrite,
// core.WriteShutter): the same connection, with the wire's steps under
// exported names that stay out of the public type's method set.
type connCore Conn

func (p *connCore) Handle(wcs []verbs.WC)          { (*Conn)(p).handle(wcs) }
func (p *connCore) FailLocked(err error)           { (*Conn)(p).failLocked(err) }
func (p *connCore) DrainTime() time.Duration       { return (*Conn)(p).drainTime() }
func (p *connCore) Drain(dl *core.Deadline)        { (*Conn)(p).drain(dl) }
func (p *connCore) ReleaseVerbs()                  { (*Conn)(p).releaseVerbs() }
func (p *connCore) WriteShutLocked() bool          { return (*Conn)(p).writeShutLocked() }
func (p *connCore) ShutWriteLocked() (bool, error) { return (*Conn)(p).shutWriteLocked() }
func (p *connCore) Flush() error                   { return (*Conn)(p).flush() }
