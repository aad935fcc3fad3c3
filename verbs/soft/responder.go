package soft

import (
	"syscall"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// The responder is the QP's receive half, as the receiver is a gVisor TCP
// endpoint's: the receive queue, the PSN it expects next, the execution
// of the peer's SENDs, WRITEs and READs against registered memory (rkey,
// bounds and access checks), RNR, and the ACKs, NAKs and READ responses
// that answer them. Its frames come in through the QP's receive role and
// its answers go out in the QP's transmit batches (engine.go).
//
// ACKs: every frame this QP sends carries the current ACK, and a READ
// response or NAK is an ACK too. When the receive role runs out of input
// with requests executed and not yet acknowledged, the responder either
// asks for a standalone ACK at once, or, on a connection whose two sides
// agreed to delayed ACKs in the handshake (hsDelayedAcks), lets the ACK
// wait up to ackDelay for a frame of this QP's to ride on: a request/
// response exchange then costs each side one frame (one write) per
// message, as TCP's delayed ACKs ride on the reply. A requester that
// needs its completion promptly says so on the frame (flagAckReq: a
// signaled WR, the last WR before a signaled bind or invalidation, one
// that leaves half its send queue unacknowledged, every frame when its
// transport timer is short), and that one is acknowledged
// at once, as every ackEvery requests are. Nothing else changes: an ACK
// is still due only for requests that executed, RNR and NAKs go at once,
// and ackDelay is far below any transport timeout (the requester asks
// for every ACK at once when its timeout is not: ackEachBelow).

// recvSlot is a run of n receive WRs posted one after another: n is 1
// unless they are alike (same id, no SGE), as a stream's receives are, so
// that RecvDepth of those take one slot.
type recvSlot struct {
	wrid   uint64
	sg     [][]byte
	gates  []gateRef // sg[i]'s region's fence
	length uint64
	status verbs.WCStatus
	n      uint32
}

type readResp struct {
	psn  uint32
	data []byte
	gate gateRef // data's region's fence, as the READ was admitted under
}

// responder is a QP's receive half. Its fields are guarded by the QP's mu.
type responder struct {
	q *qp // the QP it is half of

	// Receive queue: runs of alike WRs (recvSlot), rq[i % len(rq)],
	// len(rq) a power of two that grows as runs pile up; rqWRs counts
	// the WRs, bounded by cap.MaxRecvWR.
	rq     []recvSlot
	rqHead uint32
	rqTail uint32
	rqWRs  int

	rcvExpected uint32     // PSN of the next request to execute
	rnrDiscard  bool       // after an RNR NAK: drop requests until the NAKed one returns
	resp        []readResp // READ responses to send, resp[i % len(resp)]: nil until a READ comes
	respHead    uint32
	respTail    uint32
	nakPending  bool
	nakPSN      uint32
	nakSyn      uint32
	lastAckSent uint32
	ackWanted   bool
	ackEvery    int // ask for an ACK every ackEvery requests executed

	// Delayed ACKs (the peer agreed: qp.delayedAcks). ackTimer, made
	// when the engine starts (so that the data path allocates nothing),
	// sends the ACK no frame carried within ackDelay (ackDelayExpired);
	// ackTimerOn says it runs.
	ackTimer   *time.Timer
	ackTimerOn bool
}

// ackDelay is how long an ACK waits for a frame of this QP's to carry it
// (the consumer's reply, say) before it goes alone. Long enough for a
// reply that a busy process is slow to send, far below the transport
// timeouts, and it only delays what no requester asked to hear of soon.
// A variable for the tests, set before a QP starts.
var ackDelay = defaultAckDelay

const defaultAckDelay = 2 * time.Millisecond

// init sets up q's responder in place: the receive ring at its starting
// size, no READ response ring until a READ comes.
func (res *responder) init(q *qp) {
	res.q = q
	res.rq = res.newRecvSlots(rqStartSlots)
	res.ackEvery = 16
}

// The errors postRecv returns.
var (
	errRecvState = &verbs.Error{Op: "ibv_post_recv", Errno: syscall.EINVAL, Detail: "QP is in RESET"}
	errRecvSGE   = &verbs.Error{Op: "ibv_post_recv", Errno: syscall.EINVAL, Detail: "more SGEs than the QP's max_recv_sge"}
	errRecvFull  = &verbs.Error{Op: "ibv_post_recv", Errno: syscall.ENOMEM, Detail: "receive queue full"}
)

// postRecv checks wr and queues it, as one more of the last run when
// they are alike. Called with mu held.
func (res *responder) postRecv(wr *verbs.RecvWR) error {
	q := res.q
	if q.destroyed {
		return errDestroyed
	}
	if q.state == verbs.QPSReset {
		return errRecvState
	}
	if len(wr.SG) > q.cap.MaxRecvSGE {
		return errRecvSGE
	}
	if res.rqWRs == q.cap.MaxRecvWR {
		return errRecvFull
	}
	if q.state == verbs.QPSErr {
		wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		q.rcq.push(&wc, false)
		return nil
	}
	if len(wr.SG) == 0 && res.rqHead != res.rqTail {
		if t := res.recvAt(res.rqTail - 1); t.wrid == wr.WRID && len(t.sg) == 0 && t.status == verbs.WCSuccess {
			t.n++ // alike: one more in the run
			res.rqWRs++
			return nil
		}
	}
	if res.rqTail-res.rqHead == uint32(len(res.rq)) {
		res.growRQ()
	}
	r := res.recvAt(res.rqTail)
	r.wrid, r.status, r.length, r.n = wr.WRID, verbs.WCSuccess, 0, 1
	r.sg, r.gates = r.sg[:0], r.gates[:0]
	var ok bool
	r.sg, r.gates, r.length, ok = resolveSG(q.pd, wr.SG, verbs.AccessLocalWrite, r.sg, r.gates)
	if !ok {
		r.status = verbs.WCLocProtErr
	}
	res.rqTail++
	res.rqWRs++
	return nil
}

// recvAt is the receive slot (run) at index i.
func (res *responder) recvAt(i uint32) *recvSlot { return &res.rq[i&uint32(len(res.rq)-1)] }

// popRecv consumes the oldest receive WR. Called with mu held, the queue
// not empty.
func (res *responder) popRecv() {
	r := res.recvAt(res.rqHead)
	res.rqWRs--
	if r.n--; r.n == 0 {
		r.sg, r.gates = r.sg[:0], r.gates[:0]
		res.rqHead++
	}
}

// ackable is the ACK value the responder may send: every request before it
// has executed and its READ response (if any) is ahead of it in the stream.
func (res *responder) ackable() uint32 {
	if res.respHead != res.respTail {
		return res.resp[res.respHead%uint32(len(res.resp))].psn
	}
	return res.rcvExpected
}

// wantAck asks the transmitter for an ACK of what has executed; a frame
// that carries it first makes the standalone one unneeded (appendAck).
// Called with mu held.
func (res *responder) wantAck() {
	res.ackWanted = true
	res.q.kick()
}

// idleAck runs when the receive role runs out of input with requests
// executed since it last did: it asks for the ACK at once when a request
// asked for it (prompt) or the connection does not delay ACKs, and
// otherwise lets it wait for a frame to ride on, for ackDelay at most.
// Called with mu held.
func (res *responder) idleAck(prompt bool) {
	if res.lastAckSent == res.ackable() {
		return
	}
	if prompt || !res.q.delayedAcks {
		res.wantAck()
		return
	}
	if res.ackTimerOn {
		return
	}
	res.ackTimerOn = true
	res.ackTimer.Reset(ackDelay)
}

// delayAcks makes the delayed-ACK timer, stopped: the connection's two
// sides agreed to delayed ACKs. Called with mu held as the engine starts.
func (res *responder) delayAcks() {
	if res.ackTimer == nil {
		res.ackTimer = time.AfterFunc(time.Hour, res.ackDelayExpired)
		res.ackTimer.Stop()
	}
}

// ackDelayExpired sends the delayed ACK that no frame carried.
func (res *responder) ackDelayExpired() {
	q := res.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !res.ackTimerOn {
		return // carried meanwhile (appendAck stopped the timer too late)
	}
	res.ackTimerOn = false
	if q.running && res.lastAckSent != res.ackable() {
		res.wantAck()
	}
}

// stopAckTimer stops the delayed-ACK timer for good (the QP is
// destroyed). Called with mu held.
func (res *responder) stopAckTimer() {
	if res.ackTimer != nil {
		res.ackTimer.Stop()
	}
	res.ackTimerOn = false
}

// nak queues a NAK for the request at the responder's expected PSN. Called
// with mu held.
func (res *responder) nak(syn uint32) {
	q := res.q
	res.nakPending = true
	res.nakPSN = res.rcvExpected
	res.nakSyn = syn
	q.kick()
}

// onRequest executes one request frame as the responder. It reports
// whether the request executed (and needs an ACK).
func (res *responder) onRequest(h *header, sc *scratch) (executed bool, err error) {
	q := res.q
	q.mu.Lock()
	st := q.state
	if st != verbs.QPSRTR && st != verbs.QPSRTS && st != verbs.QPSSQD {
		// A QP in ERR or RESET drops requests unanswered, as hardware does.
		q.mu.Unlock()
		return false, q.tr.discard(h.payloadLen())
	}
	if h.psn != res.rcvExpected {
		if res.rnrDiscard || seqLT(h.psn, res.rcvExpected) {
			q.mu.Unlock()
			return false, q.tr.discard(h.payloadLen())
		}
		q.mu.Unlock()
		return false, errProtocol
	}
	res.rnrDiscard = false
	needRecv := h.typ == frameSend || h.typ == frameSendImm || h.typ == frameWriteImm
	if needRecv && res.rqHead == res.rqTail {
		res.rnrDiscard = true
		counters.rnrSent.Add(1)
		res.nak(nakRNR | uint32(q.attr.MinRNRTimer&0xff))
		q.mu.Unlock()
		return false, q.tr.discard(h.payloadLen())
	}
	var dst []byte    // WRITE / READ target
	var fence gateRef // its region's or window's, as admitted now
	if h.typ == frameWrite || h.typ == frameWriteImm || h.typ == frameReadReq {
		need := verbs.AccessRemoteWrite
		if h.typ == frameReadReq {
			need = verbs.AccessRemoteRead
		}
		if q.qpAccess&need == 0 {
			// An operation the QP does not allow (its access flags),
			// whatever the MR allows: an invalid request, as rxe and
			// hardware answer it, and the responder's QP goes to ERR.
			q.flush(0, 0, false)
			res.nak(nakInvReq)
			q.mu.Unlock()
			return false, q.tr.discard(h.payloadLen())
		}
		if h.len > 0 {
			// A window's rkey (mw.go) serves the QP it was bound on.
			var ok bool
			dst, fence, ok = q.pd.remote(q, h.rkey, h.raddr, h.len, need)
			if !ok {
				// Class C error: NAK the requester, and the responder's
				// QP goes to ERR too.
				// ERR first: the NAK may leave (and the requester see
				// it) before nak returns, which releases mu to write.
				q.flush(0, 0, false)
				res.nak(nakRemAccess)
				q.mu.Unlock()
				return false, q.tr.discard(h.payloadLen())
			}
		}
	}
	switch h.typ {
	case frameReadReq:
		if res.respTail-res.respHead >= uint32(max(q.attr.MaxDestRdAtomic, 1)) {
			q.flush(0, 0, false)
			res.nak(nakInvReq)
			q.mu.Unlock()
			return false, nil
		}
		if res.respTail-res.respHead == uint32(len(res.resp)) {
			res.growResp()
		}
		res.resp[res.respTail&uint32(len(res.resp)-1)] = readResp{psn: h.psn, data: dst, gate: fence}
		res.respTail++
		res.rcvExpected++
		q.kick()
		q.mu.Unlock()
		return true, nil
	case frameWrite:
		// A payload that is here is copied under mu, as a SEND's (below).
		here := payloadHere(q.tr, h.len)
		if !here {
			q.mu.Unlock()
		}
		err := q.tr.readPayload(dst, fence)
		if err != nil && err != errFenced {
			if here {
				q.mu.Unlock()
			}
			return false, err
		}
		if !here {
			q.mu.Lock()
		}
		if err == errFenced {
			res.accessCut()
			q.mu.Unlock()
			return false, nil
		}
		res.rcvExpected++
		q.mu.Unlock()
		return true, nil
	}
	// SEND, SEND_WITH_IMM, WRITE_WITH_IMM: consume a receive.
	r := res.recvAt(res.rqHead)
	wc := verbs.WC{WRID: r.wrid, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: h.len, QPNum: q.num}
	if h.typ != frameSend {
		wc.Flags = verbs.WCWithImm
		wc.Imm = h.imm
	}
	if h.typ == frameWriteImm {
		wc.Opcode = verbs.WCRecvRDMAWithImm
	} else {
		var bad verbs.WCStatus
		var syn uint32
		switch {
		case r.status != verbs.WCSuccess:
			bad, syn = r.status, nakRemOp
		case uint64(h.len) > r.length:
			bad, syn = verbs.WCLocLenErr, nakInvReq
		}
		if bad != verbs.WCSuccess {
			res.popRecv()
			wc.Status = bad
			q.rcq.push(&wc, false)
			q.flush(0, 0, false)
			res.nak(syn)
			q.mu.Unlock()
			return false, q.tr.discard(h.payloadLen())
		}
		sc.n = copy(sc.sg, r.sg)
		copy(sc.gates, r.gates)
	}
	res.popRecv()
	// A payload the transport holds already is copied under mu: the copy
	// cannot wait on the peer (nor on a fence: Dereg waits out copies,
	// never the other way round), and the request completes in the same
	// hold of mu, not a second one. One that is still coming is read with
	// mu released.
	here := payloadHere(q.tr, h.len)
	if !here {
		q.mu.Unlock()
	}
	var fenced bool
	if h.typ == frameWriteImm {
		if err = q.tr.readPayload(dst, fence); err == errFenced {
			fenced, err = true, nil
		}
	} else {
		fenced, err = sc.readFrom(q.tr, int(h.len))
	}
	if err != nil {
		if here {
			q.mu.Unlock()
		}
		return false, err
	}
	if !here {
		q.mu.Lock()
	}
	if fenced {
		// The target region went away while the payload came in: for a
		// WRITE WITH IMMEDIATE its memory (a remote access error, as when
		// the rkey is gone), for a SEND the receive WR's buffer (a local
		// protection error here, a remote operational error there).
		wc.Status = verbs.WCWRFlushErr
		syn := uint32(nakRemAccess)
		if h.typ != frameWriteImm {
			wc.Status, syn = verbs.WCLocProtErr, nakRemOp
		}
		if q.state != verbs.QPSErr && q.state != verbs.QPSReset {
			q.rcq.push(&wc, false)
			q.flush(0, 0, false)
			res.nak(syn)
		}
		q.mu.Unlock()
		return false, nil
	}
	res.rcvExpected++
	if q.state != verbs.QPSErr && q.state != verbs.QPSReset {
		if !q.rcq.push(&wc, h.flags&flagSolicited != 0) {
			q.flush(0, 0, false)
		}
	}
	q.mu.Unlock()
	return true, nil
}

// payloadHere reports whether tr holds the next n bytes already read
// (transport.holds: the TCP transport's buffer, which a read of a header
// and a small payload fills at once; the shared-memory ring's record),
// so that reading them is a copy, and a short one (payloadHereMax): a
// writer waits for mu while it runs.
func payloadHere(tr transport, n uint32) bool {
	return n <= payloadHereMax && tr.holds(int(n))
}

// payloadHereMax is the largest payload copied under mu: a page, some
// 100 ns of copy, against the lock pair it saves.
const payloadHereMax = 4096

// accessCut fails the request whose target region was deregistered while
// its payload came in (the rest was skipped): a remote access error, as
// when the rkey is no longer there. Called with mu held.
func (res *responder) accessCut() {
	q := res.q
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset {
		return
	}
	q.flush(0, 0, false)
	res.nak(nakRemAccess)
}

// newRecvSlots returns n receive slots, each with its own SGEs.
func (res *responder) newRecvSlots(n int) []recvSlot {
	q := res.q
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
func (res *responder) growRQ() {
	rq := res.newRecvSlots(2 * len(res.rq))
	mask := uint32(len(rq) - 1)
	for i := res.rqHead; i != res.rqTail; i++ {
		old, r := res.recvAt(i), &rq[i&mask]
		sg, gates := r.sg, r.gates
		*r = *old
		r.sg, r.gates = append(sg, old.sg...), append(gates, old.gates...)
	}
	res.rq = rq
}

// growResp makes room for one more READ response: the ring is made on the
// first READ request and doubles when full. Called with mu held.
func (res *responder) growResp() {
	q := res.q
	resp := make([]readResp, max(respStartSlots, 2*len(res.resp)))
	mask := uint32(len(resp) - 1)
	for i := res.respHead; i != res.respTail; i++ {
		resp[i&mask] = res.resp[i&uint32(len(res.resp)-1)]
	}
	res.resp = resp
	if !q.snd.wdArmed {
		q.snd.armWatchdog() // so that a quiet QP gives the ring back
	}
}

// appendResponses adds to b the READ responses due, in order, and then a
// pending NAK. Called with mu held by the transmit role's holder.
func (res *responder) appendResponses(b *batch) {
	for res.respHead != res.respTail && b.room() && b.bytes < batchBytes {
		r := &res.resp[res.respHead%uint32(len(res.resp))]
		h := header{typ: frameReadResp, flags: flagAck, psn: r.psn, ack: r.psn, len: uint32(len(r.data))}
		h.encode(b.frame())
		b.piped = b.piped || len(r.data) >= pipelineMin
		if len(r.data) > 0 {
			b.v = append(b.v, r.data)
			b.vg = append(b.vg, r.gate)
			b.bytes += len(r.data)
		}
		r.data, r.gate = nil, gateRef{}
		res.respHead++
		res.lastAckSent = r.psn + 1
	}
	if res.nakPending && res.respHead == res.respTail && b.room() {
		h := header{typ: frameNak, flags: flagAck, psn: res.nakPSN, ack: res.nakPSN, imm: res.nakSyn}
		h.encode(b.frame())
		res.nakPending = false
		res.lastAckSent = res.nakPSN
	}
}

// appendAck notes that ack went out on the batch's requests (carried),
// or else adds a standalone ACK of ack to b if one is wanted and the
// stream is open. Called with mu held by the transmit role's holder, last
// in the batch.
func (res *responder) appendAck(b *batch, ack uint32, carried, open bool) {
	if carried {
		res.lastAckSent = ack
	}
	if res.ackWanted && ack != res.lastAckSent && b.room() && open {
		h := header{typ: frameAck, flags: flagAck, ack: ack}
		h.encode(b.frame())
		res.lastAckSent = ack
	}
	if res.lastAckSent == res.rcvExpected {
		res.ackWanted = false
	}
	if res.ackTimerOn && res.lastAckSent == ack {
		// A frame carried the delayed ACK.
		res.ackTimer.Stop()
		res.ackTimerOn = false
	}
}

// startAt makes psn the next request the responder expects (a manual
// QP's RQ PSN). Called with mu held.
func (res *responder) startAt(psn uint32) {
	res.rcvExpected, res.lastAckSent = psn, psn
}

// empty reports whether no receive WR is posted.
func (res *responder) empty() bool { return res.rqHead == res.rqTail }

// flush completes every posted receive WR with WR_FLUSH_ERR. Called with
// mu held by qp.flush, the QP already in ERR.
func (res *responder) flush() {
	q := res.q
	for res.rqHead != res.rqTail {
		wc := verbs.WC{WRID: res.recvAt(res.rqHead).wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		res.popRecv()
		q.rcq.push(&wc, false)
	}
}

// reset forgets every receive WR without completing it (the QP moves to
// RESET). Called with mu held.
func (res *responder) reset() {
	res.rqHead, res.rqWRs = res.rqTail, 0
}
