package soft

import (
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmanet/rdma/verbs"
)

// The requester is the QP's send half, as the sender is a gVisor TCP
// endpoint's: the send queue and its PSNs (posted, sent, acknowledged),
// the READs it has in flight, retransmission after an RNR NAK, the
// transport timer (watchdog), and the completion of sends. Its frames go
// out in the QP's transmit batches (engine.go); the ACKs, NAKs and READ
// responses that answer them come in through the QP's receive role.

// sendSlot is one send queue entry, filled at post time: SGEs are resolved
// to slices of registered memory then, inline data copied.
type sendSlot struct {
	wrid      uint64
	op        verbs.Opcode
	signaled  bool
	solicited bool
	fenced    bool // SendFence: goes once the READs before it have completed
	imm       uint32
	raddr     uint64
	rkey      uint32
	length    uint32
	sg        [][]byte
	gates     []gateRef // sg[i]'s region's fence (zero for inline data)
	inl       []byte
	status    verbs.WCStatus // a local error found at post time, reported in order
	rnr       int            // RNR NAKs received for this WR
	ackReq    bool           // a signaled bind or invalidation waits behind it: ask for its ACK at once
}

// localOp is a bind or an invalidation that executed when it was posted
// and completes behind the send WRs posted before it: once every WR before
// PSN after has completed (mw.go).
type localOp struct {
	wrid     uint64
	op       verbs.Opcode
	after    uint32
	signaled bool
}

// requester is a QP's send half. Its fields are guarded by the QP's mu.
type requester struct {
	q *qp // the QP it is half of

	// Send queue; slot for PSN p is sq[p % len(sq)], len(sq) a power of
	// two that grows up to cap.MaxSendWR's (queuegrowth.go).
	// sqHead <= sqSent <= sqTail (mod 2^32): completed, transmitted, posted.
	sq       []sendSlot
	sqHead   uint32
	sqSent   uint32
	sqTail   uint32
	readsOut int  // RDMA READs transmitted and not answered
	rnrWait  bool // waiting out an RNR NAK before retransmitting
	// pokeWanted: a signaled bind or invalidation waits for the ACK of
	// requests sent without flagAckReq; the next batch asks for it.
	pokeWanted bool
	progress   uint64
	// Binds and invalidations waiting for their completion, local[localHead:],
	// in the order posted; they count against the send queue's depth.
	local     []localOp
	localHead int
	// doomed: a WR with a local error is queued; the QP goes to ERR when
	// the transmitter reaches it, so later binds and invalidations are
	// not executed but flushed.
	doomed bool

	inl inlineBufs // the send slots' inline buffers that a write in flight may read

	rnrTimer  *time.Timer // ends an RNR wait (rnrExpired)
	wdTimer   *time.Timer // the transport timer (watchdog)
	wdLast    uint64
	wdArmed   bool
	wdStrikes int
	wdDue     int64 // monotime when the watchdog is due (late: this process did not run)
}

// init sets up q's requester in place (its timers call back into it):
// the send queue at its starting size, the timers stopped.
func (req *requester) init(q *qp) {
	req.q = q
	req.sq = req.newSendSlots(min(sqStartSlots, ringSize(q.cap.MaxSendWR)))
	req.rnrTimer = time.AfterFunc(time.Hour, req.rnrExpired)
	req.rnrTimer.Stop()
	req.wdTimer = time.AfterFunc(time.Hour, req.watchdog)
	req.wdTimer.Stop()
}

// slot is the send queue entry for PSN psn.
func (req *requester) slot(psn uint32) *sendSlot { return &req.sq[psn&uint32(len(req.sq)-1)] }

// posted starts sending what was just posted, and the transport timer if
// a quiet QP's had stopped (watchdog). Called with mu held.
func (req *requester) posted() {
	if !req.wdArmed {
		req.armWatchdog()
	}
	req.q.kick()
}

// The errors postSend returns.
var (
	errPostState     = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "QP is not in RTS"}
	errPostSGE       = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "more SGEs than the QP's max_send_sge"}
	errPostOpcode    = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "unsupported opcode"}
	errPostBind      = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "BIND_MW needs Bind with a soft MW and MR, and no SGEs"}
	errPostLocalInv  = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "LOCAL_INV takes no SGEs"}
	errPostInline    = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "inline data above the QP's max_inline_data"}
	errPostInlineNil = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "inline SGE with a nil address"}
	errPostReadInl   = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "RDMA_READ cannot be inline"}
	errPostFull      = &verbs.Error{Op: "ibv_post_send", Errno: syscall.ENOMEM, Detail: "send queue full"}
)

// postSend checks wr and queues it in the next send slot, its SGEs
// resolved and inline data copied. Called with mu held.
func (req *requester) postSend(wr *verbs.SendWR) error {
	q := req.q
	if q.destroyed {
		return errDestroyed
	}
	if q.state != verbs.QPSRTS && q.state != verbs.QPSErr {
		return errPostState
	}
	if len(wr.SG) > q.cap.MaxSendSGE {
		return errPostSGE
	}
	local := wr.Opcode == verbs.OpBindMW || wr.Opcode == verbs.OpLocalInv
	if wr.Opcode > verbs.OpRDMARead && !local {
		return errPostOpcode
	}
	var w *mw
	var parent *mr
	if wr.Opcode == verbs.OpBindMW {
		var ok1, ok2 bool
		if wr.Bind != nil {
			w, ok1 = wr.Bind.MW.(*mw)
			parent, ok2 = wr.Bind.MR.(*mr)
		}
		if !ok1 || !ok2 || len(wr.SG) > 0 {
			return errPostBind
		}
	} else if local && len(wr.SG) > 0 {
		return errPostLocalInv
	}
	inline := !local && wr.Flags&verbs.SendInline != 0
	if inline {
		if wr.Opcode == verbs.OpRDMARead {
			return errPostReadInl
		}
		n := 0
		for i := range wr.SG {
			if wr.SG[i].Addr == 0 && wr.SG[i].Length > 0 {
				return errPostInlineNil
			}
			n += int(wr.SG[i].Length)
		}
		if n > q.cap.MaxInlineData {
			return errPostInline
		}
	}
	if int(req.sqTail-req.sqHead)+len(req.local)-req.localHead >= q.cap.MaxSendWR {
		return errPostFull
	}
	if q.state == verbs.QPSErr {
		// Posting to a QP in ERR is allowed and flushes at once, as on hardware.
		wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, QPNum: q.num}
		q.scq.push(&wc, false)
		return nil
	}
	if local {
		req.postLocal(wr, w, parent)
		return nil
	}
	if req.sqTail-req.sqHead == uint32(len(req.sq)) {
		req.growSQ()
	}
	s := req.slot(req.sqTail)
	s.wrid, s.op, s.imm, s.raddr, s.rkey = wr.WRID, wr.Opcode, wr.Imm, wr.RemoteAddr, wr.RKey
	s.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
	s.solicited = wr.Flags&verbs.SendSolicited != 0
	s.fenced = wr.Flags&verbs.SendFence != 0
	s.status, s.rnr, s.ackReq = verbs.WCSuccess, 0, false
	s.sg, s.gates = s.sg[:0], s.gates[:0]
	var total uint64
	if inline {
		s.inl = req.inl.fresh(s.inl)
		for i := range wr.SG {
			s.inl = append(s.inl, req.localBytes(&wr.SG[i])...)
		}
		total = uint64(len(s.inl))
		if total > 0 {
			s.sg = append(s.sg, s.inl)
			s.gates = append(s.gates, gateRef{})
		}
	} else {
		need := verbs.Access(0)
		if wr.Opcode == verbs.OpRDMARead {
			need = verbs.AccessLocalWrite
		}
		var ok bool
		s.sg, s.gates, total, ok = resolveSG(q.pd, wr.SG, need, s.sg, s.gates)
		if !ok {
			s.status = verbs.WCLocProtErr
		}
	}
	if total > maxMsgSize && s.status == verbs.WCSuccess {
		s.status = verbs.WCLocLenErr
	}
	if s.status != verbs.WCSuccess {
		req.doomed = true
	}
	s.length = uint32(total)
	req.sqTail++
	return nil
}

// postLocal executes a bind (w to parent) or an invalidation as it is
// posted (mw.go), and queues its completion behind the WRs before it. One
// that fails takes a send queue slot with its error status instead, which
// the transmitter reports in order as it reaches it, moving the QP to ERR
// as a local error does. Called with mu held.
func (req *requester) postLocal(wr *verbs.SendWR, w *mw, parent *mr) {
	q := req.q
	status := verbs.WCWRFlushErr // behind a WR that fails: not executed
	if !req.doomed {
		var b *mr
		if wr.Opcode == verbs.OpBindMW {
			status = q.bind(w, parent, wr.Bind)
		} else {
			b, status = q.invalidate(wr.InvalidateRKey)
		}
		if b != nil {
			// The fence: before the completion can be polled, no copy
			// through the window is in progress and none will start.
			b.fence.close()
		}
	}
	signaled := q.sigAll || wr.Flags&verbs.SendSignaled != 0
	if status != verbs.WCSuccess {
		req.doomed = true
		if req.sqTail-req.sqHead == uint32(len(req.sq)) {
			req.growSQ()
		}
		s := req.slot(req.sqTail)
		s.wrid, s.op, s.imm, s.raddr, s.rkey = wr.WRID, wr.Opcode, 0, 0, 0
		s.signaled, s.solicited, s.fenced = signaled, false, false
		s.status, s.rnr, s.length, s.ackReq = status, 0, 0, false
		s.sg, s.gates = s.sg[:0], s.gates[:0]
		req.sqTail++
		return
	}
	if req.localHead == len(req.local) {
		req.local, req.localHead = req.local[:0], 0
	}
	req.local = append(req.local, localOp{wrid: wr.WRID, op: wr.Opcode, after: req.sqTail, signaled: signaled})
	if signaled && q.delayedAcks && req.sqHead != req.sqTail {
		// Its completion waits for the ACK of the WRs before it: ask
		// for that at once, on the last of them or, sent already, with
		// an ACK of ours.
		if last := req.sqTail - 1; seqLT(last, req.sqSent) {
			req.pokeWanted = true
		} else {
			req.slot(last).ackReq = true
		}
	}
	req.completeLocal(verbs.WCSuccess)
}

// completeLocal completes the binds and invalidations queued behind
// nothing but completed WRs (their PSN reached), with status. Called with
// mu held.
func (req *requester) completeLocal(status verbs.WCStatus) {
	q := req.q
	for req.localHead < len(req.local) && !seqLT(req.sqHead, req.local[req.localHead].after) {
		l := &req.local[req.localHead]
		req.localHead++
		if !l.signaled && status == verbs.WCSuccess {
			continue
		}
		wc := verbs.WC{WRID: l.wrid, Status: status, Opcode: wcOpcode(l.op), QPNum: q.num}
		if !q.scq.push(&wc, false) && status == verbs.WCSuccess {
			q.flush(0, 0, false)
			return
		}
	}
}

// localBytes returns the bytes an inline SGE names. Inline data ignores the
// lkey, so the address may lie outside any MR (on hardware the CPU copies it
// at post time); registered memory is looked up first.
func (req *requester) localBytes(g *verbs.SGE) []byte {
	q := req.q
	if g.Length == 0 {
		return nil
	}
	if m := q.pd.lookupLocal(g.LKey); m != nil {
		if b, ok := m.slice(g.Addr, g.Length); ok {
			return b
		}
	}
	// The caller vouches for Addr: it came from verbs.AddrOf of a live buffer.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&g.Addr))
	return unsafe.Slice((*byte)(p), g.Length)
}

// completeTo completes every send WR before PSN a successfully (the peer
// acknowledged them). Called with mu held.
func (req *requester) completeTo(a uint32) {
	q := req.q
	for req.sqHead != a {
		if req.localHead < len(req.local) {
			if req.completeLocal(verbs.WCSuccess); q.state == verbs.QPSErr {
				return
			}
		}
		s := req.slot(req.sqHead)
		if s.op == verbs.OpRDMARead {
			req.readsOut--
		}
		req.sqHead++
		if s.signaled {
			wc := verbs.WC{WRID: s.wrid, Status: verbs.WCSuccess, Opcode: wcOpcode(s.op), ByteLen: s.length, QPNum: q.num}
			if !q.scq.push(&wc, false) {
				q.flush(0, 0, false)
				return
			}
		}
	}
	if req.localHead < len(req.local) {
		req.completeLocal(verbs.WCSuccess)
	}
}

// rnrExpired ends an RNR wait: retransmission resumes.
func (req *requester) rnrExpired() {
	q := req.q
	q.mu.Lock()
	if req.rnrWait {
		req.rnrWait = false
		q.kick()
	}
	q.mu.Unlock()
}

// armWatchdog (re)starts the transport timer. Called with mu held.
func (req *requester) armWatchdog() {
	q := req.q
	d := ackTimeout(q.attr.Timeout)
	if d == 0 || q.state != verbs.QPSRTS || q.destroyed {
		req.wdTimer.Stop()
		req.wdArmed = false
		return
	}
	req.wdArmed = true
	req.wdStrikes = 0
	req.wdLast = req.progress
	req.wdDue = monotime() + int64(d)
	req.wdTimer.Reset(d)
}

// watchdog fires every ack timeout while the QP has work. Sent WRs that
// see no response for more than (retry count + 1) timeouts, while the
// transport itself goes unanswered too, complete with RETRY_EXC_ERR: the
// peer is unreachable, as a NIC concludes after its retransmissions go
// unacknowledged.
//
// Soft's engine is the NIC, and it runs in the peer's process: a peer
// that is stopped (SIGSTOP, a debugger, a frozen container) or starved
// answers nothing, though its end of the transport is there. A NIC would
// go on acknowledging for such a process, so a timeout spent while the
// transport answers (transport.answering: the peer's kernel acknowledges
// the TCP stream, or the same-host peer's process is alive) costs no
// retry: the connection then ends only when the transport does, or by the
// consumer's heartbeat (rdma.Config.PeerTimeout), as on a NIC. A timer that
// fires a whole timeout later than asked says that this process was not
// running (stopped itself, or starved): it is not the peer's silence, so
// that tick only re-arms, and the receiver has a timeout to catch up with
// what came meanwhile.
//
// As a NIC's transport timer, it runs only while there is something to
// time: a QP with nothing posted stops it until the next post (PostSend
// arms it), so that an idle QP costs no wake-ups (each is a goroutine, and
// a server holds thousands of idle QPs). If a burst grew the QP's queues,
// the timer first runs on until the QP has been quiet for a whole timeout
// (no progress), and then gives them back (trimIdle).
func (req *requester) watchdog() {
	q := req.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !req.wdArmed || q.state != verbs.QPSRTS || q.destroyed {
		return
	}
	d := ackTimeout(q.attr.Timeout)
	now := monotime()
	late := now-req.wdDue > int64(d)
	// Sent and unanswered, or, on a QP still looking for its peer
	// (manual.go), posted and not sent: either way the peer is silent.
	outstanding := req.sqHead != req.sqSent || q.manual && q.tr == nil && req.sqHead != req.sqTail
	if req.sqHead == req.sqTail && (req.progress == req.wdLast || !q.grown()) {
		q.trimIdle()
		req.wdArmed = false
		return
	}
	if outstanding && req.progress == req.wdLast {
		switch {
		case late:
			counters.lateTimers.Add(1)
		case q.tr != nil && q.tr.answering():
			req.wdStrikes = 0
			counters.peerStalls.Add(1)
		default:
			req.wdStrikes++
			counters.ackTimeouts.Add(1)
			if req.wdStrikes > q.attr.RetryCnt {
				req.wdArmed = false
				counters.retryExc.Add(1)
				q.flush(req.sqHead, verbs.WCRetryExcErr, true)
				return
			}
		}
	} else {
		req.wdStrikes = 0
	}
	req.wdLast = req.progress
	req.wdDue = now + int64(d)
	req.wdTimer.Reset(d)
}

// onAck completes send WRs the peer has acknowledged.
func (req *requester) onAck(a uint32) error {
	q := req.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset || a == req.sqHead {
		return nil
	}
	if seqLT(a, req.sqHead) || seqLT(req.sqSent, a) {
		return errProtocol
	}
	req.progress++
	req.completeTo(a)
	if req.sqSent != req.sqTail {
		q.kick() // a READ slot may have freed up
	}
	return nil
}

// onNak handles the peer's NAK of the request at h.psn: the WRs before it
// completed, and an RNR NAK goes back to it after the delay the NAK asks
// (while RNR retries remain), any other fails it and the QP.
func (req *requester) onNak(h *header) error {
	q := req.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset {
		return nil
	}
	p := h.psn
	if seqLT(p, req.sqHead) || !seqLT(p, req.sqSent) {
		return errProtocol
	}
	req.progress++
	req.completeTo(p)
	if q.state == verbs.QPSErr {
		return nil
	}
	switch h.imm &^ 0xff {
	case nakRNR:
		counters.rnrRecv.Add(1)
		s := req.slot(p)
		s.rnr++
		if q.attr.RNRRetry != 7 && s.rnr > q.attr.RNRRetry {
			counters.rnrRetryExc.Add(1)
			q.flush(p, verbs.WCRNRRetryExcErr, true)
			return nil
		}
		// Go back to p: the responder drops everything after it until p
		// comes again.
		for i := p; i != req.sqSent; i++ {
			if req.slot(i).op == verbs.OpRDMARead {
				req.readsOut--
			}
		}
		counters.retransmits.Add(uint64(req.sqSent - p))
		req.sqSent = p
		req.rnrWait = true
		req.rnrTimer.Reset(rnrDelay(h.imm & 0xff))
	case nakRemAccess:
		q.flush(p, verbs.WCRemAccessErr, true)
	case nakInvReq:
		q.flush(p, verbs.WCRemInvReqErr, true)
	default:
		q.flush(p, verbs.WCRemOpErr, true)
	}
	return nil
}

// onReadResp reads the response to the READ at h.psn into its buffers,
// through sc, and completes the WRs up to it.
func (req *requester) onReadResp(h *header, sc *scratch) error {
	q := req.q
	q.mu.Lock()
	p := h.psn
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset {
		q.mu.Unlock()
		return q.tr.discard(int(h.len))
	}
	if seqLT(p, req.sqHead) || !seqLT(p, req.sqSent) {
		q.mu.Unlock()
		return errProtocol
	}
	s := req.slot(p)
	if s.op != verbs.OpRDMARead || s.length != h.len {
		q.mu.Unlock()
		return errProtocol
	}
	sc.n = copy(sc.sg, s.sg)
	copy(sc.gates, s.gates)
	q.mu.Unlock()
	fenced, err := sc.readFrom(q.tr, int(h.len))
	if err != nil {
		return err
	}
	q.mu.Lock()
	if fenced {
		// The READ's own buffer was deregistered while the response came
		// in: it fails, as a NIC's does, and the QP goes to ERR.
		if q.state != verbs.QPSErr && q.state != verbs.QPSReset && !seqLT(p, req.sqHead) {
			req.progress++
			req.completeTo(p)
			q.flush(p, verbs.WCLocProtErr, true)
		}
		q.mu.Unlock()
		return nil
	}
	if q.state != verbs.QPSErr && q.state != verbs.QPSReset && !seqLT(p, req.sqHead) {
		req.progress++
		req.completeTo(p + 1)
		if req.sqSent != req.sqTail {
			q.kick()
		}
	}
	q.mu.Unlock()
	return nil
}

// newSendSlots returns n send slots, each with its own SGE and inline
// staging.
func (req *requester) newSendSlots(n int) []sendSlot {
	q := req.q
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
func (req *requester) growSQ() {
	sq := req.newSendSlots(2 * len(req.sq))
	mask := uint32(len(sq) - 1)
	for p := req.sqHead; p != req.sqTail; p++ {
		old, s := req.slot(p), &sq[p&mask]
		sg, gates, inl := s.sg, s.gates, s.inl
		*s = *old
		s.sg, s.gates, s.inl = append(sg, old.sg...), append(gates, old.gates...), inl
	}
	req.sq = sq
}

// appendRequests adds to b the posted requests not yet sent, each
// carrying ack, as far as the batch, the READ limit and fences allow. It
// reports whether it added any. A WR with a local error stops it and
// moves the QP to ERR. Called with mu held by the transmit role's holder,
// the QP in RTS.
func (req *requester) appendRequests(b *batch, ack uint32) (sent bool) {
	if req.rnrWait {
		return false
	}
	q := req.q
	ackEach := ackEachBelow(q.attr.Timeout)
	// A send queue half full of unacknowledged WRs asks for an ACK, so
	// that their slots come back without waiting for ackDelay.
	filling := uint32(max(1, q.cap.MaxSendWR/2))
	for req.sqSent != req.sqTail && b.room() && b.bytes < batchBytes {
		s := req.slot(req.sqSent)
		if len(b.v)+1+len(s.sg) > cap(b.v) {
			break
		}
		if s.status != verbs.WCSuccess {
			q.flush(req.sqSent, s.status, true)
			break
		}
		if s.op == verbs.OpRDMARead && req.readsOut >= max(q.attr.MaxRdAtomic, 1) {
			break
		}
		if s.fenced && req.readsOut > 0 {
			break // onReadResp kicks the sender when the READs are in
		}
		h := header{psn: req.sqSent, ack: ack, flags: flagAck, len: s.length, imm: s.imm}
		if s.solicited {
			h.flags |= flagSolicited
		}
		if q.delayedAcks && (s.signaled || s.ackReq || ackEach || req.pokeWanted || req.sqSent-req.sqHead+1 >= filling) {
			h.flags |= flagAckReq
			req.pokeWanted = false
		}
		switch s.op {
		case verbs.OpSend:
			h.typ = frameSend
		case verbs.OpSendWithImm:
			h.typ = frameSendImm
		case verbs.OpRDMAWrite:
			h.typ = frameWrite
		case verbs.OpRDMAWriteWithImm:
			h.typ = frameWriteImm
		case verbs.OpRDMARead:
			h.typ = frameReadReq
			req.readsOut++
		}
		if s.op != verbs.OpSend && s.op != verbs.OpSendWithImm {
			h.rkey, h.raddr = s.rkey, s.raddr
		}
		h.encode(b.frame())
		if h.typ != frameReadReq {
			b.payload(s.sg, s.gates, int(s.length))
		}
		req.sqSent++
		sent = true
	}
	return sent
}

// startAt makes psn the PSN of the next WR posted (a manual QP's SQ PSN)
// while the send queue is empty: nothing can be posted below RTS, so the
// queue starts at it. Called with mu held.
func (req *requester) startAt(psn uint32) {
	if req.sqHead == req.sqTail {
		req.sqHead, req.sqSent, req.sqTail = psn, psn, psn
	}
}

// empty reports whether no send WR, bind or invalidation is outstanding.
func (req *requester) empty() bool {
	return req.sqHead == req.sqTail && req.localHead == len(req.local)
}

// flush completes every outstanding send WR, bind and invalidation with
// WR_FLUSH_ERR, except the send WR at errPSN (when hasErr), which gets
// errStatus. Called with mu held by qp.flush, the QP already in ERR.
func (req *requester) flush(errPSN uint32, errStatus verbs.WCStatus, hasErr bool) {
	q := req.q
	req.rnrWait = false
	req.readsOut = 0
	req.doomed = false
	req.pokeWanted = false
	for req.sqHead != req.sqTail {
		req.completeLocal(verbs.WCWRFlushErr)
		s := req.slot(req.sqHead)
		wc := verbs.WC{WRID: s.wrid, Status: verbs.WCWRFlushErr, QPNum: q.num, Opcode: wcOpcode(s.op)}
		if hasErr && req.sqHead == errPSN {
			wc.Status = errStatus
		}
		s.sg, s.gates = s.sg[:0], s.gates[:0]
		req.sqHead++
		q.scq.push(&wc, false)
	}
	req.completeLocal(verbs.WCWRFlushErr)
	req.local, req.localHead = req.local[:0], 0
	req.sqSent = req.sqTail
}

// reset forgets every send WR without completing it (the QP moves to
// RESET). Called with mu held.
func (req *requester) reset() {
	for req.sqHead != req.sqTail {
		s := req.slot(req.sqHead)
		s.sg, s.gates = s.sg[:0], s.gates[:0]
		req.sqHead++
	}
	req.sqSent = req.sqTail
	req.local, req.localHead = req.local[:0], 0
	req.doomed = false
	req.readsOut = 0
	req.rnrWait = false
	req.pokeWanted = false
}

// rnrDelay is the IB encoding of the RNR NAK timer.
func rnrDelay(code uint32) time.Duration {
	us := [32]uint32{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	return time.Duration(us[code&31]) * time.Microsecond
}

// ackEachBelow reports whether a transport timeout of t is short enough
// that the requester asks for every ACK at once (flagAckReq): one that
// waited ackDelay would take a good part of it.
func ackEachBelow(t int) bool {
	d := ackTimeout(t)
	return d > 0 && d < 16*defaultAckDelay
}

// ackTimeout is the IB local ack timeout: 4.096 us * 2^t (0: infinite).
func ackTimeout(t int) time.Duration {
	if t <= 0 {
		return 0
	}
	return time.Duration(4096<<uint(t)) * time.Nanosecond
}

// inlineBufs keeps a send slot's inline buffer (Go memory: the WR's bytes
// copied at post time) from being written while a batch that may read it
// is being written outside mu (writing). A slot's WR completes once the
// peer acknowledged it, so its bytes were written out before its slot is
// posted to again; but with shared memory the acknowledgement's order
// reaches this process through the rings, memory that the race detector
// does not see as the same (each end maps it at its own address), and
// a stream whose sender wrote a long batch in the background had its
// early slots posted to while the sender still wrote the batch's later
// frames: reported as a race (TestRsocketStream, 2 runs in 8). So a slot
// posted to while a write is in flight gets a buffer off the free list
// and its own is held until the write is out. Buffers grow no more in
// number than the slots: one is held only in place of one taken.
type inlineBufs struct {
	writing bool     // a batch is being written outside mu
	held    [][]byte // taken out of slots while it was
	free    [][]byte // for slots posted to while a write is in flight
}

// fresh returns the buffer, empty, that a slot whose inline buffer is old
// copies its next WR's bytes into. Called with mu held.
func (b *inlineBufs) fresh(old []byte) []byte {
	if !b.writing {
		return old[:0]
	}
	b.held = append(b.held, old)
	if n := len(b.free); n > 0 {
		x := b.free[n-1]
		b.free[n-1] = nil
		b.free = b.free[:n-1]
		return x[:0]
	}
	return nil
}

// written takes in that no batch is being written any more: what was held
// may be written again. Called with mu held.
func (b *inlineBufs) written() {
	b.writing = false
	b.free = append(b.free, b.held...)
	clear(b.held)
	b.held = b.held[:0]
}
