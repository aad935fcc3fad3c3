package soft

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// qp is an RC queue pair: what its two halves share (state, attributes,
// the lock, the CQs, the transport), its requester and responder halves,
// and (once connected) the engine that moves their frames (engine.go).
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

	// The two halves of the engine (engine.go): the requester sends this
	// QP's requests and completes them, the responder executes the peer's.
	// Both work under mu, the QP's one lock.
	snd requester // requester.go
	rcv responder // responder.go

	// Transmitter: one holder at a time (txBusy), see engine.go.
	tr         transport
	txBusy     bool
	txDead     bool
	batch      batch // the transmit batch, built by whoever holds the role
	discWanted bool
	discSent   bool
	finSent    bool
	// delayedAcks: both sides agreed to delayed ACKs in the handshake
	// (hsDelayedAcks): the responder lets ACKs wait for a frame to ride
	// on, the requester marks the requests it needs acknowledged at once
	// (flagAckReq). Set once at start, before any frame.
	delayedAcks bool
	framesSent  uint64 // frames the transmitter put in its batches (tests count them)
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
	destroyed  bool
	downNotify func(error) // called once when the engine stops
	silent     atomic.Bool // tests: ignore the peer entirely (a hung host)

	// Receive role (engine.go).
	rx     rxState
	rxRole rxRole
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
		qpAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
	}
	q.attr = verbs.QPAttr{PathMTU: portMTU, MinRNRTimer: defaultMinRNR, Timeout: defaultTimeout,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16, MaxDestRdAtomic: 16}
	q.snd.init(q)
	q.rcv.init(q)
	q.batch.setFrames(min(batchStartFrames, maxBatchFrames), c.MaxSendSGE)
	q.rx.sc.sg = make([][]byte, max(c.MaxSendSGE, c.MaxRecvSGE))
	q.rx.sc.gates = make([]gateRef, len(q.rx.sc.sg))
	q.rxRole.init()
	p.nQP.Add(1)
	scq.addQP(q)
	rcq.addQP(q)
	return q, nil
}

func (q *qp) Num() uint32 { return q.num }

// seqLT reports a < b in 32-bit sequence space.
func seqLT(a, b uint32) bool { return int32(a-b) < 0 }

func (q *qp) PostSend(wrs []verbs.SendWR) error {
	q.mu.Lock()
	for i := range wrs {
		if err := q.snd.postSend(&wrs[i]); err != nil {
			if i > 0 {
				q.snd.posted()
			}
			q.mu.Unlock()
			return &verbs.PostError{Index: i, Err: err}
		}
	}
	q.snd.posted()
	q.mu.Unlock()
	return nil
}

// errDestroyed refuses a post to a destroyed QP.
var errDestroyed = &verbs.Error{Op: "ibv_post_send", Errno: syscall.EINVAL, Detail: "QP destroyed"}

func (q *qp) PostRecv(wrs []verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		if err := q.rcv.postRecv(&wrs[i]); err != nil {
			return &verbs.PostError{Index: i, Err: err}
		}
	}
	return nil
}

// resolveSG appends the bytes and the region's fence of each nonempty SGE
// of sg, looked up in p, to sgs and gates, and returns them with the SGEs' total length. An
// SGE whose key is unknown, whose region lacks the access need, or that
// lies outside its region is left out, and ok is false: the WR completes
// with a local protection error.
func resolveSG(p *pd, sg []verbs.SGE, need verbs.Access, sgs [][]byte, gates []gateRef) (_ [][]byte, _ []gateRef, total uint64, ok bool) {
	ok = true
	for i := range sg {
		g := &sg[i]
		total += uint64(g.Length)
		if g.Length == 0 {
			continue
		}
		m := p.lookupLocal(g.LKey)
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

// flush moves the QP to ERR and completes every outstanding WR with
// WR_FLUSH_ERR, except the send WR at errPSN (when hasErr), which gets
// errStatus. Called with mu held.
func (q *qp) flush(errPSN uint32, errStatus verbs.WCStatus, hasErr bool) {
	if q.state == verbs.QPSErr && !hasErr && q.snd.empty() && q.rcv.empty() {
		return
	}
	q.state = verbs.QPSErr
	q.snd.flush(errPSN, errStatus, hasErr)
	q.rcv.flush()
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
			q.rcv.startAt(attr.RQPSN)
		}
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		q.attr.SQPSN = attr.SQPSN
		if q.manual {
			q.snd.startAt(attr.SQPSN)
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
	if mask&verbs.QPAttrTimeout != 0 && (q.snd.wdArmed || q.snd.sqHead != q.snd.sqTail) {
		q.snd.armWatchdog()
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
		q.snd.reset()
		q.rcv.reset()
		q.state = s
	default:
		q.state = s
		if s == verbs.QPSRTS {
			if q.snd.sqHead != q.snd.sqTail {
				q.snd.armWatchdog()
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
	q.snd.rnrTimer.Stop()
	q.snd.wdTimer.Stop()
	q.mu.Lock()
	q.rcv.stopAckTimer()
	q.mu.Unlock()
	q.scq.removeQP(q)
	q.rcq.removeQP(q)
	q.pd.nQP.Add(-1)
	if id != nil {
		id.qpDestroyed(q)
	}
	return nil
}
