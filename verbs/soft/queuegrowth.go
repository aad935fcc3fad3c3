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

// newSendSlots returns n send slots, each with its own SGE and inline
// staging.
func (q *qp) newSendSlots(n int) []sendSlot {
	sq := make([]sendSlot, n)
	k := q.cap.MaxSendSGE
	sgs := make([][]byte, n*k)
	gates := make([]gateRef, n*k)
	var inl []byte
	if q.cap.MaxInlineData > 0 {
		inl = make([]byte, n*q.cap.MaxInlineData)
	}
	for i := range sq {
		sq[i].sg = sgs[i*k : i*k : (i+1)*k]
		sq[i].gates = gates[i*k : i*k : (i+1)*k]
		if inl != nil {
			sq[i].inl = inl[i*q.cap.MaxInlineData : i*q.cap.MaxInlineData : (i+1)*q.cap.MaxInlineData]
		}
	}
	return sq
}

// growSQ doubles the send queue. Called with mu held when every slot holds
// a WR and the QP may take more. A moved slot's SGEs still name the bytes
// they named (inline ones the old staging, left as it was).
func (q *qp) growSQ() {
	sq := q.newSendSlots(2 * len(q.sq))
	mask := uint32(len(sq) - 1)
	for p := q.sqHead; p != q.sqTail; p++ {
		old, s := q.slot(p), &sq[p&mask]
		sg, gates, inl := s.sg, s.gates, s.inl
		*s = *old
		s.sg, s.gates, s.inl = append(sg, old.sg...), append(gates, old.gates...), inl
	}
	q.sq = sq
}

// newRecvSlots returns n receive slots, each with its own SGEs.
func (q *qp) newRecvSlots(n int) []recvSlot {
	rq := make([]recvSlot, n)
	k := q.cap.MaxRecvSGE
	sgs := make([][]byte, n*k)
	gates := make([]gateRef, n*k)
	for i := range rq {
		rq[i].sg = sgs[i*k : i*k : (i+1)*k]
		rq[i].gates = gates[i*k : i*k : (i+1)*k]
	}
	return rq
}

// growRQ doubles the receive ring. Called with mu held when every slot
// holds a run of WRs.
func (q *qp) growRQ() {
	rq := q.newRecvSlots(2 * len(q.rq))
	mask := uint32(len(rq) - 1)
	for i := q.rqHead; i != q.rqTail; i++ {
		old, r := q.recvAt(i), &rq[i&mask]
		sg, gates := r.sg, r.gates
		*r = *old
		r.sg, r.gates = append(sg, old.sg...), append(gates, old.gates...)
	}
	q.rq = rq
}

// growResp makes room for one more READ response: the ring is made on the
// first READ request and doubles when full. Called with mu held.
func (q *qp) growResp() {
	resp := make([]readResp, max(respStartSlots, 2*len(q.resp)))
	mask := uint32(len(resp) - 1)
	for i := q.respHead; i != q.respTail; i++ {
		resp[i&mask] = q.resp[i&uint32(len(q.resp)-1)]
	}
	q.resp = resp
	if !q.wdArmed {
		q.armWatchdog() // so that a quiet QP gives the ring back
	}
}

// setBatchFrames sizes the transmit batch: n frame headers and room for
// their iovecs. Called with mu held by the transmit role's holder, between
// batches.
func (q *qp) setBatchFrames(n int) {
	q.hdrs = make([][hdrLen]byte, n)
	q.iovBuf = make([][]byte, 0, n*(1+q.cap.MaxSendSGE)+8)
	q.iovGates = make([]gateRef, 0, cap(q.iovBuf))
}

// grown reports whether a queue trimIdle shrinks is past its starting
// size. Called with mu held.
func (q *qp) grown() bool {
	return len(q.sq) > sqStartSlots || q.resp != nil || len(q.hdrs) > batchStartFrames
}

// trimIdle shrinks a quiet QP's send queue, READ response ring and
// transmit batch back to their starting sizes, those not in use. Called
// with mu held, the send queue empty.
func (q *qp) trimIdle() {
	if len(q.sq) > sqStartSlots {
		q.sq = q.newSendSlots(sqStartSlots)
	}
	if q.respHead == q.respTail {
		q.resp = nil
	}
	if !q.txBusy && len(q.hdrs) > batchStartFrames {
		q.setBatchFrames(batchStartFrames)
	}
}
