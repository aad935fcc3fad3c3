package rdma

import "github.com/rdmanet/rdma/verbs"

// A Conn's per-WR arrays follow its traffic: a server holds thousands of
// idle connections, so the send queue's slots (the WRs, their SGEs, the
// send buffer offsets and one-sided operations they complete) start at
// sendStartSlots and double when they fill, up to the endpoint's slots
// (SendDepth+2); the notification ring is made on the first notification
// and doubles up to RecvDepth. Growth allocates; a connection that has
// carried its peak load sends and receives without allocating.
const (
	sendStartSlots  = 8
	notesStartSlots = 4
)

// resizeSendQueueLocked gives the send queue n slots, moving the WRs from
// the oldest not completed (sqDone) to the newest queued to their slots in
// the new arrays. A submit posting from the old arrays outside mu reads
// entries that are never written again.
func (c *Conn) resizeSendQueueLocked(n int) {
	sq := make([]verbs.SendWR, n)
	sge := make([]verbs.SGE, n)
	ends := make([]uint64, n)
	ops := make([]*remoteOp, n)
	for seq := c.sqDone; seq != c.sqPosted; seq++ {
		o, s := seq%uint64(len(c.sq)), seq%uint64(n)
		sq[s], ends[s], ops[s] = c.sq[o], c.sqEnds[o], c.sqOps[o]
		if len(sq[s].SG) > 0 {
			sge[s] = c.sqSGE[o]
			sq[s].SG = sge[s : s+1]
		}
	}
	c.sq, c.sqSGE, c.sqEnds, c.sqOps = sq, sge, ends, ops
}

// sendSlotLocked returns the send queue slot of the next WR, growing the
// queue if the slot still holds one not completed.
func (c *Conn) sendSlotLocked() uint64 {
	if c.sqPosted-c.sqDone >= uint64(len(c.sq)) && len(c.sq) < c.slots {
		c.resizeSendQueueLocked(min(2*len(c.sq), c.slots))
	}
	return c.sqPosted % uint64(len(c.sq))
}

// noteRoomLocked makes room in the notification ring for one more,
// reporting false when RecvDepth are held (the peer broke the credits).
func (c *Conn) noteRoomLocked() bool {
	if c.notesLen < len(c.notes) {
		return true
	}
	if len(c.notes) >= c.recvWRs {
		return false
	}
	notes := make([]notification, min(max(notesStartSlots, 2*len(c.notes)), c.recvWRs))
	for i := range c.notesLen {
		notes[i] = c.notes[(c.notesHead+i)%len(c.notes)]
	}
	c.notes, c.notesHead = notes, 0
	return true
}
