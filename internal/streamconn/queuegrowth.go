package streamconn

import (
	"github.com/rdmanet/rdma/internal/sendq"
)

// A Conn's per-WR arrays follow its traffic: a server holds thousands of
// idle connections, so the send queue's slots (the WRs, their SGEs, the
// send buffer offsets and one-sided operations they complete) start at
// sendq.StartSlots and double when they fill, up to the endpoint's slots
// (SendDepth+2); the notification ring (onesided.NoteQueue) is made on the
// first notification and doubles up to RecvDepth. Growth allocates; a
// connection that has carried its peak load sends and receives without
// allocating. One that then goes quiet gives the memory back (trimIdle), so
// that what idle connections hold does not creep up to what busy ones need.

// TrimIdle runs at each tick of the connection's watch (heartbeat.go):
// when no stream data moved either way since the previous tick (moved
// holds the count then) and no send WR is outstanding, the send queue goes
// back to its starting slots and an empty notification ring is dropped. A
// connection that moves data between ticks keeps what it has grown.
func (c growing) TrimIdle(moved *uint64) {
	c.Core.Mu.Lock()
	m := c.TX.Tail + c.RX.Tail
	idle := m == *moved
	*moved = m
	grown := len(c.SQ.WRs) > sendq.StartSlots || c.Notes.Idle()
	c.Core.Mu.Unlock()
	if !idle || !grown {
		return
	}
	c.TryPoll() // apply the completions that wait, the last probe's say
	c.Core.Mu.Lock()
	defer c.Core.Mu.Unlock()
	if c.Core.Torn || c.TX.Tail+c.RX.Tail != m {
		return
	}
	if c.SQ.Trim() {
		c.Core.Counters.Trims++
	}
	c.Notes.Trim()
}
