package soft

// A QP's queues follow its traffic. A server holds thousands of idle
// connections, so a QP starts with a few send slots, one receive run, no
// READ response slots and small transmit batches, and each of those
// doubles when it fills, up to what the QP was created with (the send and
// receive WR counts stay the limits posting enforces). Rings are powers of
// two indexed by sequence number, so that an index stays right across the
// wrap of the 32-bit PSN; growing one moves each live entry to its index in
// the larger ring. Growth allocates; a QP that has carried its peak load
// posts and transmits without allocating. One that then goes quiet (no
// ACK for a whole transport timeout, nothing posted) gives the memory back
// (trimIdle, from the watchdog), so that what idle QPs hold does not creep
// up to what busy ones need.
const (
	sqStartSlots     = 8
	rqStartSlots     = 2
	respStartSlots   = 4
	batchStartFrames = 8
)

// ringSize is the power-of-two ring length that holds n entries.
func ringSize(n int) int {
	r := 1
	for r < n {
		r <<= 1
	}
	return r
}

// grown reports whether a queue trimIdle shrinks is past its starting
// size. Called with mu held.
func (q *qp) grown() bool {
	return len(q.snd.sq) > sqStartSlots || q.rcv.resp != nil || len(q.batch.hdrs) > batchStartFrames
}

// trimIdle shrinks a quiet QP's send queue, READ response ring and
// transmit batch back to their starting sizes, those not in use. Called
// with mu held, the send queue empty.
func (q *qp) trimIdle() {
	if len(q.snd.sq) > sqStartSlots {
		q.snd.sq = q.snd.newSendSlots(sqStartSlots)
	}
	if q.rcv.respHead == q.rcv.respTail {
		q.rcv.resp = nil
	}
	if !q.txBusy && len(q.batch.hdrs) > batchStartFrames {
		q.batch.setFrames(batchStartFrames, q.cap.MaxSendSGE)
	}
}
