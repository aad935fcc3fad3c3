package rdma

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

// trimIdle runs at each tick of the connection's watch (heartbeat.go):
// when no stream data moved either way since the previous tick (moved
// holds the count then) and no send WR is outstanding, the send queue goes
// back to its starting slots and an empty notification ring is dropped. A
// connection that moves data between ticks keeps what it has grown.
func (c *Conn) trimIdle(moved *uint64) {
	c.core.Mu.Lock()
	m := c.tx.Tail + c.rx.Tail
	idle := m == *moved
	*moved = m
	grown := len(c.sq.WRs) > sendq.StartSlots || c.notes.Idle()
	c.core.Mu.Unlock()
	if !idle || !grown {
		return
	}
	c.tryPoll() // apply the completions that wait, the last probe's say
	c.core.Mu.Lock()
	defer c.core.Mu.Unlock()
	if c.core.Torn || c.tx.Tail+c.rx.Tail != m {
		return
	}
	if c.sq.Trim() {
		c.core.Counters.Trims++
	}
	c.notes.Trim()
}
