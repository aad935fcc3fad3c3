package soft

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmanet/rdma/verbs"
)

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
}

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

// localOp is a bind or an invalidation that executed when it was posted
// and completes behind the send WRs posted before it: once every WR before
// PSN after has completed (mw.go).
type localOp struct {
	wrid     uint64
	op       verbs.Opcode
	after    uint32
	signaled bool
}

type readResp struct {
	psn  uint32
	data []byte
	gate gateRef // data's region's fence, as the READ was admitted under
}

// qp is an RC queue pair: its queues, its state, and (once connected) the
// engine that moves its frames (engine.go).
type qp struct {
	num    uint32
	pd     *pd
	scq    *cq
	rcq    *cq
	cap    verbs.QPCap
	sigAll bool

	mu    sync.Mutex
	state verbs.QPState
	attr  verbs.QPAttr // the rest of the attributes (timeouts, retries, depths)
	sock  *net.TCPConn // the TCP socket under the connection, once connected (tos.go)

	// Send queue; slot for PSN p is sq[p % len(sq)], len(sq) a power of
	// two that grows up to cap.MaxSendWR's (queuegrowth.go).
	// sqHead <= sqSent <= sqTail (mod 2^32): completed, transmitted, posted.
	sq       []sendSlot
	sqHead   uint32
	sqSent   uint32
	sqTail   uint32
	readsOut int  // RDMA READs transmitted and not answered
	rnrWait  bool // waiting out an RNR NAK before retransmitting
	progress uint64
	// Binds and invalidations waiting for their completion, local[localHead:],
	// in the order posted; they count against the send queue's depth.
	local     []localOp
	localHead int
	// doomed: a WR with a local error is queued; the QP goes to ERR when
	// the transmitter reaches it, so later binds and invalidations are
	// not executed but flushed.
	doomed bool

	// Receive queue: runs of alike WRs (recvSlot), rq[i % len(rq)],
	// len(rq) a power of two that grows as runs pile up; rqWRs counts
	// the WRs, bounded by cap.MaxRecvWR.
	rq     []recvSlot
	rqHead uint32
	rqTail uint32
	rqWRs  int

	// Responder state.
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
	ackEvery    int

	// Transmitter: one holder at a time (txBusy), see engine.go.
	tr         transport
	txBusy     bool
	txDead     bool
	batchPiped bool           // the last batch built carries a large READ response (pipeliner)
	iovBuf     [][]byte       // a batch's iovecs
	iovGates   []gateRef      // iovBuf[i]'s region's or window's fence, zero for headers and inline data
	hdrs       [][hdrLen]byte // a batch's frame headers: a few, up to maxBatchFrames as batches fill
	discWanted bool
	discSent   bool
	finSent    bool
	// preamble is what the transport carries before the first frame: the
	// active side's RTU on a TCP connection (connect.go), sent with the
	// first batch or, if none comes soon, alone by preambleTimer.
	preamble      []byte
	preambleTimer *time.Timer
	preambleDue   bool // the timer fired: the preamble goes without frames

	// Without the CM (manual.go): created by PD.CreateQP, connected to
	// its peer by address at RTR.
	manual   bool
	qpAccess verbs.Access // the remote operations the QP lets its peer perform
	link     *qpLink      // the dial or wait for the peer, from RTR on
	retired  bool         // its engine ran: RESET does not make it connectable again

	// Lifecycle.
	id         *cmID
	running    bool
	done       chan struct{}
	wg         sync.WaitGroup
	rnrTimer   *time.Timer
	wdTimer    *time.Timer
	wdLast     uint64
	wdArmed    bool
	wdStrikes  int
	wdDue      int64 // monotime when the watchdog is due (late: this process did not run)
	destroyed  bool
	downNotify func(error) // called once when the engine stops
	silent     atomic.Bool // tests: ignore the peer entirely (a hung host)

	// Receive role (engine.go).
	rx       rxState
	rxOwner  atomic.Int32
	rxWant   atomic.Bool
	rxWanter atomic.Pointer[compChannel]
	rxParked atomic.Bool
	rxLive   atomic.Bool
	rxEnded  atomic.Bool
	rxWake   chan struct{}
	rxTimer  *time.Timer
	rxArmed  atomic.Bool
	rxFreeAt atomic.Int64 // monotime when a waiter last let go of the role
}

const (
	maxBatchFrames = 64
	batchBytes     = 1 << 20
	defaultTimeout = 20 // 4.096 us * 2^20 = 4.3 s: rdma_cm's IB default
	defaultMinRNR  = 12 // 0.64 ms
)

func newQP(p *pd, attr *verbs.QPInitAttr) (*qp, error) {
	const op = "ibv_create_qp"
	if attr == nil || attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "send and receive CQs are required")
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "CQs are not from the soft provider")
	}
	c := attr.Cap
	if c.MaxSendWR < 1 || c.MaxSendWR > maxQPWR || c.MaxRecvWR < 0 || c.MaxRecvWR > maxQPWR {
		return nil, verbs.Errorf(op, syscall.EINVAL, "queue sizes send %d recv %d outside 1..%d", c.MaxSendWR, c.MaxRecvWR, maxQPWR)
	}
	if c.MaxSendSGE < 0 || c.MaxSendSGE > maxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > maxSGE {
		return nil, verbs.Errorf(op, syscall.EINVAL, "SGE counts send %d recv %d outside 0..%d", c.MaxSendSGE, c.MaxRecvSGE, maxSGE)
	}
	if c.MaxInlineData < 0 || c.MaxInlineData > maxInline {
		return nil, verbs.Errorf(op, syscall.EINVAL, "max inline %d outside 0..%d", c.MaxInlineData, maxInline)
	}
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	q := &qp{
		num: nextQPN(), pd: p, scq: scq, rcq: rcq, cap: c, sigAll: attr.SignalAll,
		state:    verbs.QPSReset,
		done:     make(chan struct{}),
		ackEvery: 16,
		qpAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
	}
	q.attr = verbs.QPAttr{PathMTU: portMTU, MinRNRTimer: defaultMinRNR, Timeout: defaultTimeout,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16, MaxDestRdAtomic: 16}
	q.sq = q.newSendSlots(min(sqStartSlots, ringSize(c.MaxSendWR)))
	q.rq = q.newRecvSlots(rqStartSlots)
	q.setBatchFrames(min(batchStartFrames, maxBatchFrames))
	q.rx.sc.sg = make([][]byte, max(c.MaxSendSGE, c.MaxRecvSGE))
	q.rx.sc.gates = make([]gateRef, len(q.rx.sc.sg))
	q.rnrTimer = time.AfterFunc(time.Hour, q.rnrExpired)
	q.rnrTimer.Stop()
	q.wdTimer = time.AfterFunc(time.Hour, q.watchdog)
	q.wdTimer.Stop()
	q.rxWake = make(chan struct{}, 1)
	q.rxTimer = time.NewTimer(time.Hour)
	q.rxTimer.Stop()
	p.nQP.Add(1)
	scq.addQP(q)
	rcq.addQP(q)
	return q, nil
}

func (q *qp) Num() uint32 { return q.num }

func (q *qp) slot(psn uint32) *sendSlot { return &q.sq[psn&uint32(len(q.sq)-1)] }

// seqLT reports a < b in 32-bit sequence space.
func seqLT(a, b uint32) bool { return int32(a-b) < 0 }

func (q *qp) PostSend(wrs []verbs.SendWR) error {
	q.mu.Lock()
	for i := range wrs {
		if err := q.postSend(&wrs[i]); err != nil {
			if i > 0 {
				q.posted()
			}
			q.mu.Unlock()
			return &verbs.PostError{Index: i, Err: err}
		}
	}
	q.posted()
	q.mu.Unlock()
	return nil
}

// posted starts sending what was just posted, and the transport timer if
// a quiet QP's had stopped (watchdog). Called with mu held.
func (q *qp) posted() {
	if !q.wdArmed {
		q.armWatchdog()
	}
	q.kick()
}

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
	errRecvState     = &verbs.Error{Op: "ibv_post_recv", Errno: syscall.EINVAL, Detail: "QP is in RESET"}
	errRecvSGE       = &verbs.Error{Op: "ibv_post_recv", Errno: syscall.EINVAL, Detail: "more SGEs than the QP's max_recv_sge"}
	errRecvFull      = &verbs.Error{Op: "ibv_post_recv", Errno: syscall.ENOMEM, Detail: "receive queue full"}
	errDestroyed     = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "QP destroyed"}
)

func (q *qp) postSend(wr *verbs.SendWR) error {
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
	if int(q.sqTail-q.sqHead)+len(q.local)-q.localHead >= q.cap.MaxSendWR {
		return errPostFull
	}
	if q.state == verbs.QPSErr {
		// Posting to a QP in ERR is allowed and flushes at once, as on hardware.
		wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, QPNum: q.num}
		q.scq.push(&wc, false)
		return nil
	}
	if local {
		q.postLocal(wr, w, parent)
		return nil
	}
	if q.sqTail-q.sqHead == uint32(len(q.sq)) {
		q.growSQ()
	}
	s := q.slot(q.sqTail)
	s.wrid, s.op, s.imm, s.raddr, s.rkey = wr.WRID, wr.Opcode, wr.Imm, wr.RemoteAddr, wr.RKey
	s.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
	s.solicited = wr.Flags&verbs.SendSolicited != 0
	s.fenced = wr.Flags&verbs.SendFence != 0
	s.status, s.rnr = verbs.WCSuccess, 0
	s.sg, s.gates = s.sg[:0], s.gates[:0]
	var total uint64
	if inline {
		s.inl = s.inl[:0]
		for i := range wr.SG {
			s.inl = append(s.inl, q.localBytes(&wr.SG[i])...)
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
		s.sg, s.gates, total, ok = q.resolveSG(wr.SG, need, s.sg, s.gates)
		if !ok {
			s.status = verbs.WCLocProtErr
		}
	}
	if total > maxMsgSize && s.status == verbs.WCSuccess {
		s.status = verbs.WCLocLenErr
	}
	if s.status != verbs.WCSuccess {
		q.doomed = true
	}
	s.length = uint32(total)
	q.sqTail++
	return nil
}

// postLocal executes a bind (w to parent) or an invalidation as it is
// posted (mw.go), and queues its completion behind the WRs before it. One
// that fails takes a send queue slot with its error status instead, which
// the transmitter reports in order as it reaches it, moving the QP to ERR
// as a local error does. Called with mu held.
func (q *qp) postLocal(wr *verbs.SendWR, w *mw, parent *mr) {
	status := verbs.WCWRFlushErr // behind a WR that fails: not executed
	if !q.doomed {
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
		q.doomed = true
		if q.sqTail-q.sqHead == uint32(len(q.sq)) {
			q.growSQ()
		}
		s := q.slot(q.sqTail)
		s.wrid, s.op, s.imm, s.raddr, s.rkey = wr.WRID, wr.Opcode, 0, 0, 0
		s.signaled, s.solicited, s.fenced = signaled, false, false
		s.status, s.rnr, s.length = status, 0, 0
		s.sg, s.gates = s.sg[:0], s.gates[:0]
		q.sqTail++
		return
	}
	if q.localHead == len(q.local) {
		q.local, q.localHead = q.local[:0], 0
	}
	q.local = append(q.local, localOp{wrid: wr.WRID, op: wr.Opcode, after: q.sqTail, signaled: signaled})
	q.completeLocal(verbs.WCSuccess)
}

// completeLocal completes the binds and invalidations queued behind
// nothing but completed WRs (their PSN reached), with status. Called with
// mu held.
func (q *qp) completeLocal(status verbs.WCStatus) {
	for q.localHead < len(q.local) && !seqLT(q.sqHead, q.local[q.localHead].after) {
		l := &q.local[q.localHead]
		q.localHead++
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
func (q *qp) localBytes(g *verbs.SGE) []byte {
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

func (q *qp) PostRecv(wrs []verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		if err := q.postRecv(&wrs[i]); err != nil {
			return &verbs.PostError{Index: i, Err: err}
		}
	}
	return nil
}

func (q *qp) postRecv(wr *verbs.RecvWR) error {
	if q.destroyed {
		return errDestroyed
	}
	if q.state == verbs.QPSReset {
		return errRecvState
	}
	if len(wr.SG) > q.cap.MaxRecvSGE {
		return errRecvSGE
	}
	if q.rqWRs == q.cap.MaxRecvWR {
		return errRecvFull
	}
	if q.state == verbs.QPSErr {
		wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		q.rcq.push(&wc, false)
		return nil
	}
	if len(wr.SG) == 0 && q.rqHead != q.rqTail {
		if t := q.recvAt(q.rqTail - 1); t.wrid == wr.WRID && len(t.sg) == 0 && t.status == verbs.WCSuccess {
			t.n++ // alike: one more in the run
			q.rqWRs++
			return nil
		}
	}
	if q.rqTail-q.rqHead == uint32(len(q.rq)) {
		q.growRQ()
	}
	r := q.recvAt(q.rqTail)
	r.wrid, r.status, r.length, r.n = wr.WRID, verbs.WCSuccess, 0, 1
	r.sg, r.gates = r.sg[:0], r.gates[:0]
	var ok bool
	r.sg, r.gates, r.length, ok = q.resolveSG(wr.SG, verbs.AccessLocalWrite, r.sg, r.gates)
	if !ok {
		r.status = verbs.WCLocProtErr
	}
	q.rqTail++
	q.rqWRs++
	return nil
}

// resolveSG appends the bytes and the region's fence of each nonempty SGE
// of sg to sgs and gates, and returns them with the SGEs' total length. An
// SGE whose key is unknown, whose region lacks the access need, or that
// lies outside its region is left out, and ok is false: the WR completes
// with a local protection error.
func (q *qp) resolveSG(sg []verbs.SGE, need verbs.Access, sgs [][]byte, gates []gateRef) (_ [][]byte, _ []gateRef, total uint64, ok bool) {
	ok = true
	for i := range sg {
		g := &sg[i]
		total += uint64(g.Length)
		if g.Length == 0 {
			continue
		}
		m := q.pd.lookupLocal(g.LKey)
		if m == nil || m.access&need != need {
			ok = false
			continue
		}
		b, inside := m.slice(g.Addr, g.Length)
		if !inside {
			ok = false
			continue
		}
		sgs = append(sgs, b)
		gates = append(gates, m.fence.ref())
	}
	return sgs, gates, total, ok
}

// recvAt is the receive slot (run) at index i.
func (q *qp) recvAt(i uint32) *recvSlot { return &q.rq[i&uint32(len(q.rq)-1)] }

// popRecv consumes the oldest receive WR. Called with mu held, the queue
// not empty.
func (q *qp) popRecv() {
	r := q.recvAt(q.rqHead)
	q.rqWRs--
	if r.n--; r.n == 0 {
		r.sg, r.gates = r.sg[:0], r.gates[:0]
		q.rqHead++
	}
}

// wcOpcode maps a send opcode to its completion opcode.
func wcOpcode(op verbs.Opcode) verbs.WCOpcode {
	switch op {
	case verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.OpRDMARead:
		return verbs.WCRDMARead
	case verbs.OpBindMW:
		return verbs.WCBindMW
	case verbs.OpLocalInv:
		return verbs.WCLocalInv
	}
	return verbs.WCSend
}

// completeTo completes every send WR before PSN a successfully (the peer
// acknowledged them). Called with mu held.
func (q *qp) completeTo(a uint32) {
	for q.sqHead != a {
		if q.localHead < len(q.local) {
			if q.completeLocal(verbs.WCSuccess); q.state == verbs.QPSErr {
				return
			}
		}
		s := q.slot(q.sqHead)
		if s.op == verbs.OpRDMARead {
			q.readsOut--
		}
		q.sqHead++
		if s.signaled {
			wc := verbs.WC{WRID: s.wrid, Status: verbs.WCSuccess, Opcode: wcOpcode(s.op), ByteLen: s.length, QPNum: q.num}
			if !q.scq.push(&wc, false) {
				q.flush(0, 0, false)
				return
			}
		}
	}
	if q.localHead < len(q.local) {
		q.completeLocal(verbs.WCSuccess)
	}
}

// flush moves the QP to ERR and completes every outstanding WR with
// WR_FLUSH_ERR, except the send WR at errPSN (when hasErr), which gets
// errStatus. Called with mu held.
func (q *qp) flush(errPSN uint32, errStatus verbs.WCStatus, hasErr bool) {
	if q.state == verbs.QPSErr && !hasErr && q.sqHead == q.sqTail && q.rqHead == q.rqTail && q.localHead == len(q.local) {
		return
	}
	q.state = verbs.QPSErr
	q.rnrWait = false
	q.readsOut = 0
	q.doomed = false
	for q.sqHead != q.sqTail {
		q.completeLocal(verbs.WCWRFlushErr)
		s := q.slot(q.sqHead)
		wc := verbs.WC{WRID: s.wrid, Status: verbs.WCWRFlushErr, QPNum: q.num, Opcode: wcOpcode(s.op)}
		if hasErr && q.sqHead == errPSN {
			wc.Status = errStatus
		}
		s.sg, s.gates = s.sg[:0], s.gates[:0]
		q.sqHead++
		q.scq.push(&wc, false)
	}
	q.completeLocal(verbs.WCWRFlushErr)
	q.local, q.localHead = q.local[:0], 0
	q.sqSent = q.sqTail
	for q.rqHead != q.rqTail {
		wc := verbs.WC{WRID: q.recvAt(q.rqHead).wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
		q.popRecv()
		q.rcq.push(&wc, false)
	}
}

// fatal moves the QP to ERR from outside (CQ overrun on a shared CQ).
func (q *qp) fatal(verbs.WCStatus) {
	q.mu.Lock()
	q.flush(0, 0, false)
	q.mu.Unlock()
}

func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	const op = "ibv_modify_qp"
	if attr == nil {
		return verbs.Errorf(op, syscall.EINVAL, "nil attributes")
	}
	q.mu.Lock()
	oldLink, err := q.modify(attr, mask)
	q.mu.Unlock()
	// A QP leaving RTR and RTS stops looking for its peer, and one moved
	// to RESET drops its connection (manual.go).
	q.stopLink(oldLink)
	if oldLink != nil && err == nil && mask&verbs.QPAttrState != 0 && attr.State == verbs.QPSReset {
		q.stop()
	}
	return err
}

// modify is Modify with mu held. It returns the QP's link to its peer
// when the QP has just left RTR and RTS, for Modify to stop.
func (q *qp) modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) (*qpLink, error) {
	const op = "ibv_modify_qp"
	if q.destroyed {
		return nil, verbs.ErrClosed
	}
	if mask&verbs.QPAttrTimeout != 0 && (attr.Timeout < 0 || attr.Timeout > 31) ||
		mask&verbs.QPAttrRetryCnt != 0 && (attr.RetryCnt < 0 || attr.RetryCnt > 7) ||
		mask&verbs.QPAttrRNRRetry != 0 && (attr.RNRRetry < 0 || attr.RNRRetry > 7) ||
		mask&verbs.QPAttrMinRNRTimer != 0 && (attr.MinRNRTimer < 0 || attr.MinRNRTimer > 31) ||
		mask&verbs.QPAttrMaxRdAtomic != 0 && (attr.MaxRdAtomic < 0 || attr.MaxRdAtomic > maxRdAtom) ||
		mask&verbs.QPAttrMaxDestRdAtomic != 0 && (attr.MaxDestRdAtomic < 0 || attr.MaxDestRdAtomic > maxRdAtom) ||
		mask&verbs.QPAttrPathMTU != 0 && (attr.PathMTU < verbs.MTU256 || attr.PathMTU > portMTU) ||
		mask&verbs.QPAttrRQPSN != 0 && attr.RQPSN > 0xffffff ||
		mask&verbs.QPAttrSQPSN != 0 && attr.SQPSN > 0xffffff ||
		mask&verbs.QPAttrDestQPN != 0 && attr.DestQPNum > 0xffffff ||
		mask&verbs.QPAttrPort != 0 && attr.PortNum != 1 ||
		mask&verbs.QPAttrPKeyIndex != 0 && attr.PKeyIndex != 0 ||
		mask&verbs.QPAttrAccessFlags != 0 && attr.AccessFlags&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead) != 0 ||
		mask&verbs.QPAttrState != 0 && (attr.State < verbs.QPSReset || attr.State > verbs.QPSErr) {
		return nil, verbs.Errorf(op, syscall.EINVAL, "attribute out of range")
	}
	check := mask
	if !q.manual && mask&verbs.QPAttrState != 0 && q.state == verbs.QPSReset && attr.State == verbs.QPSInit {
		// RESET->INIT on a CM-managed QP takes the port, P_Key index
		// and access flags from the CM (rdma_init_qp_attr, as rdmacore
		// does) when the caller gives none.
		check |= verbs.QPAttrPort | verbs.QPAttrPKeyIndex | verbs.QPAttrAccessFlags
	}
	if err := verbs.CheckRCModify(q.state, attr, check); err != nil {
		return nil, err
	}
	next := q.state
	if mask&verbs.QPAttrState != 0 {
		next = attr.State
	}
	var link *qpLink
	if next == verbs.QPSRTR && q.state == verbs.QPSInit && q.manual {
		var err error
		if link, err = q.toRTR(attr); err != nil {
			return nil, err
		}
	}
	setIf(mask, verbs.QPAttrTimeout, &q.attr.Timeout, attr.Timeout)
	setIf(mask, verbs.QPAttrRetryCnt, &q.attr.RetryCnt, attr.RetryCnt)
	setIf(mask, verbs.QPAttrRNRRetry, &q.attr.RNRRetry, attr.RNRRetry)
	setIf(mask, verbs.QPAttrMinRNRTimer, &q.attr.MinRNRTimer, attr.MinRNRTimer)
	setIf(mask, verbs.QPAttrMaxRdAtomic, &q.attr.MaxRdAtomic, attr.MaxRdAtomic)
	setIf(mask, verbs.QPAttrMaxDestRdAtomic, &q.attr.MaxDestRdAtomic, attr.MaxDestRdAtomic)
	setIf(mask, verbs.QPAttrPathMTU, &q.attr.PathMTU, attr.PathMTU)
	setIf(mask, verbs.QPAttrPort, &q.attr.PortNum, attr.PortNum)
	setIf(mask, verbs.QPAttrPKeyIndex, &q.attr.PKeyIndex, attr.PKeyIndex)
	setIf(mask, verbs.QPAttrDestQPN, &q.attr.DestQPNum, attr.DestQPNum)
	setIf(mask, verbs.QPAttrAV, &q.attr.AH, attr.AH)
	if mask&verbs.QPAttrAccessFlags != 0 {
		q.attr.AccessFlags = attr.AccessFlags
		q.qpAccess = attr.AccessFlags & (verbs.AccessRemoteWrite | verbs.AccessRemoteRead)
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		q.attr.RQPSN = attr.RQPSN
		if q.manual {
			// The peer's first request carries its SQ PSN, which its
			// program gave this QP as the RQ PSN.
			q.rcvExpected, q.lastAckSent = attr.RQPSN, attr.RQPSN
		}
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		q.attr.SQPSN = attr.SQPSN
		if q.manual && q.sqHead == q.sqTail {
			// Nothing can be posted below RTS: the queue starts at the PSN.
			q.sqHead, q.sqSent, q.sqTail = attr.SQPSN, attr.SQPSN, attr.SQPSN
		}
	}
	var old *qpLink
	if mask&verbs.QPAttrState != 0 {
		q.setState(attr.State)
		if link != nil {
			q.startLink(link)
		} else if next != verbs.QPSRTR && next != verbs.QPSRTS && q.link != nil {
			old, q.link = q.link, nil
		}
	}
	if mask&verbs.QPAttrTimeout != 0 && (q.wdArmed || q.sqHead != q.sqTail) {
		q.armWatchdog()
	}
	return old, nil
}

// setIf copies v into *dst when mask selects the attribute bit.
func setIf[T any](mask, bit verbs.QPAttrMask, dst *T, v T) {
	if mask&bit != 0 {
		*dst = v
	}
}

// setState applies a validated transition. Called with mu held.
func (q *qp) setState(s verbs.QPState) {
	switch s {
	case verbs.QPSErr:
		q.flush(0, 0, false)
	case verbs.QPSReset:
		// RESET forgets every WR without completing it, as on hardware.
		for q.sqHead != q.sqTail {
			s := q.slot(q.sqHead)
			s.sg, s.gates = s.sg[:0], s.gates[:0]
			q.sqHead++
		}
		q.sqSent = q.sqTail
		q.local, q.localHead = q.local[:0], 0
		q.doomed = false
		q.rqHead, q.rqWRs = q.rqTail, 0
		q.readsOut = 0
		q.rnrWait = false
		q.state = s
	default:
		q.state = s
		if s == verbs.QPSRTS {
			if q.sqHead != q.sqTail {
				q.armWatchdog()
			}
			q.kick()
		}
	}
}

func (q *qp) Query() (verbs.QPAttr, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return verbs.QPAttr{}, verbs.ErrClosed
	}
	a := q.attr
	a.State = q.state
	a.Cap = q.cap
	a.QPNum = q.num
	if q.sock != nil {
		// What the socket says, not what was asked: a closed socket
		// reports nothing.
		if tos, err := connTOS(q.sock); err == nil {
			a.TrafficClass = tos
		}
	}
	return a, nil
}

// Destroy stops the engine (closing the connection's transport) and frees
// the QP. WRs still queued are dropped without completions.
func (q *qp) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	q.destroyed = true
	q.state = verbs.QPSReset
	id := q.id
	link := q.link
	q.link = nil
	q.mu.Unlock()
	q.stopLink(link)
	q.stop()
	q.rnrTimer.Stop()
	q.wdTimer.Stop()
	q.scq.removeQP(q)
	q.rcq.removeQP(q)
	q.pd.nQP.Add(-1)
	if id != nil {
		id.qpDestroyed(q)
	}
	return nil
}

// rnrDelay is the IB encoding of the RNR NAK timer.
func rnrDelay(code uint32) time.Duration {
	us := [32]uint32{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	return time.Duration(us[code&31]) * time.Microsecond
}

// ackTimeout is the IB local ack timeout: 4.096 us * 2^t (0: infinite).
func ackTimeout(t int) time.Duration {
	if t <= 0 {
		return 0
	}
	return time.Duration(4096<<uint(t)) * time.Nanosecond
}
