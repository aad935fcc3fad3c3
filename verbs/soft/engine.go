package soft

import (
	"errors"
	"io"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// The engine moves a connected QP's frames.
//
// Transmit: exactly one goroutine at a time holds the transmit role
// (qp.txBusy). Whoever adds work (PostSend, the receiver queuing an ACK,
// NAK or READ response, a timer) takes the role if it is free and writes
// the batch itself without blocking; if the transport cannot take it all,
// the remainder and the role pass to a sender goroutine started for it,
// which may block and ends once nothing is left to write (an idle QP has
// none). So PostSend never blocks, and on the latency path the
// bytes leave from the caller's goroutine with no hand-off.
//
// Receive: whoever holds the receive role (see rxOwner below: the QP's
// receiver goroutine, or a goroutine waiting in GetEvent) reads frames,
// executes requests against registered memory, and generates completions
// and coalesced ACKs (when it runs out of input, or every ackEvery
// requests; an ACK also rides on every frame we send).

// start attaches a transport and starts the sender; the receiver starts
// with startReceiver once the handshake is complete.
func (q *qp) start(tr transport, peer *hsMsg, down func(error)) {
	q.mu.Lock()
	q.tr = tr
	q.downNotify = down
	q.attr.DestQPNum = peer.qpn
	q.ackEvery = max(1, min(16, int(peer.sqDepth)/4))
	if h, ok := tr.(interface{ ackEvery(int) int }); ok {
		q.ackEvery = h.ackEvery(q.ackEvery) // a transport where ACKs are cheap asks for more
	}
	q.running = true
	q.mu.Unlock()
}

// stop closes the transport and waits for the engine's goroutines.
func (q *qp) stop() {
	q.mu.Lock()
	tr := q.tr
	if q.running {
		q.running = false
		close(q.done)
	}
	q.mu.Unlock()
	if tr != nil {
		_ = tr.close()
	}
	q.wg.Wait()
	q.rxTimer.Stop()
	q.mu.Lock()
	if q.preambleTimer != nil {
		q.preambleTimer.Stop()
	}
	q.mu.Unlock()
}

// sendPreamble writes what the transport carries before the first frame
// when no frame has taken it along (preambleTimer).
func (q *qp) sendPreamble() {
	q.mu.Lock()
	if q.preamble != nil && q.running {
		q.preambleDue = true
		q.kick()
	}
	q.mu.Unlock()
}

// kick makes sure pending transmit work gets written. Called with mu held;
// it may release and retake mu.
func (q *qp) kick() {
	if q.txBusy || q.tr == nil || q.txDead {
		return
	}
	q.txBusy = true
	for {
		v, g, _ := q.buildBatch()
		if len(v) == 0 {
			q.txBusy = false
			return
		}
		tr := q.tr
		piped := q.batchPiped
		q.mu.Unlock()
		setPipelined(tr, piped)
		n, err := tr.writev(v, g, false)
		q.mu.Lock()
		if err != nil {
			q.txFailed(err)
			return
		}
		if rest := trimVec(v, n); len(rest) > 0 {
			q.handOff(rest, g[len(v)-len(rest):])
			return
		}
		q.afterWrite()
	}
}

// txFailed: the transport broke; the receiver sees it too and tears down.
// Called with mu held. A write the dereg fence stopped (errFenced) leaves a
// frame half written on a transport that works: it is closed, so that the
// peer sees the connection end instead of the rest of that frame, and the
// receiver here tears down.
func (q *qp) txFailed(err error) {
	q.txDead = true
	q.txBusy = false
	if err == errFenced {
		tr := q.tr
		q.mu.Unlock()
		_ = tr.close()
		q.mu.Lock()
	}
}

// handOff passes the transmit role, with what a non-blocking write left
// over (and its regions' fences), to a sender goroutine. Called with mu
// held by the role's holder.
func (q *qp) handOff(rest [][]byte, gates []gateRef) {
	if !q.running {
		q.txFailed(nil) // stopped: the transport is closed
		return
	}
	q.wg.Add(1) // stop waits for it
	go q.sender(rest, gates)
}

// afterWrite runs when a whole batch is out. Called with mu held.
func (q *qp) afterWrite() {
	if q.discSent && !q.finSent {
		q.finSent = true
		_ = q.tr.closeWrite()
	}
}

// sender writes what a non-blocking attempt left over (v), and everything
// that queues behind it, blocking on the transport as needed; it gives up
// the transmit role and ends once nothing is left to write.
func (q *qp) sender(v [][]byte, g []gateRef) {
	defer q.wg.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.txDead {
		if len(v) == 0 {
			if v, g, _ = q.buildBatch(); len(v) == 0 {
				q.txBusy = false
				return
			}
		}
		tr := q.tr
		piped := q.batchPiped // of the batch v came from, or was just built
		q.mu.Unlock()
		setPipelined(tr, piped)
		_, err := tr.writev(v, g, true)
		q.mu.Lock()
		v, g = nil, nil
		if err != nil {
			q.txFailed(err)
			return
		}
		q.afterWrite()
	}
}

// pipelineMin is the READ response from which a batch is a pipeliner's
// business: its requester copies it out as it lands.
const pipelineMin = 64 << 10

// pipeliner is a transport that writes a READ response differently (shm:
// in smaller records, shmRecordMax).
type pipeliner interface{ pipeline(on bool) }

// setPipelined tells tr whether the batch it is about to write carries a
// large READ response.
func setPipelined(tr transport, on bool) {
	if p, ok := tr.(pipeliner); ok {
		p.pipeline(on)
	}
}

// ackable is the ACK value the responder may send: every request before it
// has executed and its READ response (if any) is ahead of it in the stream.
func (q *qp) ackable() uint32 {
	if q.respHead != q.respTail {
		return q.resp[q.respHead%uint32(len(q.resp))].psn
	}
	return q.rcvExpected
}

// buildBatch collects the frames to write next into q.iovBuf, and beside
// each iovec the fence of the region it lies in into q.iovGates: READ
// responses, a NAK, requests (each carrying the current ACK), a DISC, and
// a standalone ACK if one is wanted and nothing else carried it. Called
// with mu held by the transmit role's holder.
func (q *qp) buildBatch() ([][]byte, []gateRef, int) {
	if q.txDead || q.discSent {
		return nil, nil, 0
	}
	v, vg := q.iovBuf[:0], q.iovGates[:0]
	nh, bytes := 0, 0
	q.batchPiped = false
	frame := func(h *header) {
		h.encode(&q.hdrs[nh])
		v = append(v, q.hdrs[nh][:])
		vg = append(vg, gateRef{})
		nh++
		bytes += hdrLen
	}
	for q.respHead != q.respTail && nh < len(q.hdrs) && bytes < batchBytes {
		r := &q.resp[q.respHead%uint32(len(q.resp))]
		frame(&header{typ: frameReadResp, flags: flagAck, psn: r.psn, ack: r.psn, len: uint32(len(r.data))})
		q.batchPiped = q.batchPiped || len(r.data) >= pipelineMin
		if len(r.data) > 0 {
			v = append(v, r.data)
			vg = append(vg, r.gate)
			bytes += len(r.data)
		}
		r.data, r.gate = nil, gateRef{}
		q.respHead++
		q.lastAckSent = r.psn + 1
	}
	ack := q.ackable()
	if q.nakPending && q.respHead == q.respTail && nh < len(q.hdrs) {
		frame(&header{typ: frameNak, flags: flagAck, psn: q.nakPSN, ack: q.nakPSN, imm: q.nakSyn})
		q.nakPending = false
		q.lastAckSent = q.nakPSN
	}
	if q.state == verbs.QPSRTS && !q.rnrWait && !q.discWanted {
		for q.sqSent != q.sqTail && nh < len(q.hdrs) && bytes < batchBytes {
			s := q.slot(q.sqSent)
			if len(v)+1+len(s.sg) > cap(v) {
				break
			}
			if s.status != verbs.WCSuccess {
				q.flush(q.sqSent, s.status, true)
				break
			}
			if s.op == verbs.OpRDMARead && q.readsOut >= max(q.attr.MaxRdAtomic, 1) {
				break
			}
			if s.fenced && q.readsOut > 0 {
				break // onReadResp kicks the sender when the READs are in
			}
			h := header{psn: q.sqSent, ack: ack, flags: flagAck, len: s.length, imm: s.imm}
			if s.solicited {
				h.flags |= flagSolicited
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
				q.readsOut++
			}
			if s.op != verbs.OpSend && s.op != verbs.OpSendWithImm {
				h.rkey, h.raddr = s.rkey, s.raddr
			}
			frame(&h)
			if h.typ != frameReadReq {
				v = append(v, s.sg...)
				vg = append(vg, s.gates...)
				bytes += int(s.length)
			}
			q.sqSent++
			q.lastAckSent = ack
		}
	}
	if q.discWanted && nh < len(q.hdrs) {
		frame(&header{typ: frameDisc})
		q.discSent = true
	}
	if q.ackWanted && ack != q.lastAckSent && nh < len(q.hdrs) && !q.discSent {
		frame(&header{typ: frameAck, flags: flagAck, ack: ack})
		q.lastAckSent = ack
	}
	if q.lastAckSent == q.rcvExpected {
		q.ackWanted = false
	}
	if q.preamble != nil && (nh > 0 || q.preambleDue) {
		v, vg = append(v, nil), append(vg, gateRef{})
		copy(v[1:], v)
		copy(vg[1:], vg)
		v[0], vg[0] = q.preamble, gateRef{}
		bytes += len(q.preamble)
		q.preamble = nil
		q.preambleTimer.Stop()
	}
	q.iovBuf, q.iovGates = v[:0], vg[:0]
	if len(q.hdrs) < maxBatchFrames && (nh == len(q.hdrs) || cap(v)-len(v) < 1+q.cap.MaxSendSGE) {
		// Full: the next batches may take more. v keeps the arrays it was
		// built in until it is written.
		q.setBatchFrames(min(2*len(q.hdrs), maxBatchFrames))
	}
	return v, vg, bytes
}

// rnrExpired ends an RNR wait: retransmission resumes.
func (q *qp) rnrExpired() {
	q.mu.Lock()
	if q.rnrWait {
		q.rnrWait = false
		q.kick()
	}
	q.mu.Unlock()
}

// armWatchdog (re)starts the transport timer. Called with mu held.
func (q *qp) armWatchdog() {
	d := ackTimeout(q.attr.Timeout)
	if d == 0 || q.state != verbs.QPSRTS || q.destroyed {
		q.wdTimer.Stop()
		q.wdArmed = false
		return
	}
	q.wdArmed = true
	q.wdStrikes = 0
	q.wdLast = q.progress
	q.wdDue = monotime() + int64(d)
	q.wdTimer.Reset(d)
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
func (q *qp) watchdog() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.wdArmed || q.state != verbs.QPSRTS || q.destroyed {
		return
	}
	d := ackTimeout(q.attr.Timeout)
	now := monotime()
	late := now-q.wdDue > int64(d)
	// Sent and unanswered, or, on a QP still looking for its peer
	// (manual.go), posted and not sent: either way the peer is silent.
	outstanding := q.sqHead != q.sqSent || q.manual && q.tr == nil && q.sqHead != q.sqTail
	if q.sqHead == q.sqTail && (q.progress == q.wdLast || !q.grown()) {
		q.trimIdle()
		q.wdArmed = false
		return
	}
	if outstanding && q.progress == q.wdLast {
		switch {
		case late:
			counters.lateTimers.Add(1)
		case q.tr != nil && q.tr.answering():
			q.wdStrikes = 0
			counters.peerStalls.Add(1)
		default:
			q.wdStrikes++
			counters.ackTimeouts.Add(1)
			if q.wdStrikes > q.attr.RetryCnt {
				q.wdArmed = false
				counters.retryExc.Add(1)
				q.flush(q.sqHead, verbs.WCRetryExcErr, true)
				return
			}
		}
	} else {
		q.wdStrikes = 0
	}
	q.wdLast = q.progress
	q.wdDue = now + int64(d)
	q.wdTimer.Reset(d)
}

var errProtocol = errors.New("soft: peer broke the frame protocol")

// The receive role. Frames are read by whoever holds it: the QP's receiver
// goroutine (the background), or a goroutine waiting in GetEvent on a
// completion channel fed by this QP alone, which then reads the transport
// itself, as a goroutine blocked in a TCP Read would: no hand-off between
// goroutines on the latency path. When such a waiter gets its event it
// lets go of the role, and the background takes it back only if nobody
// waits again within rxHandback, so that ACKs, RDMA WRITEs and READ
// requests keep being served while the application is busy elsewhere.
const (
	rxFree       = 0
	rxBackground = 1
	rxApp        = 2
	rxHandback   = time.Millisecond
)

// rxState is the receive loop's state; only the role holder touches it.
type rxState struct {
	hb      [hdrLen]byte
	h       header
	sc      scratch
	owed    int // requests executed since we last asked for an ACK
	gotDisc bool
	drv     *compChannel // the channel whose waiter holds the role
}

// startReceiver starts the background receiver; pre (the handshake's last
// step) runs first.
func (q *qp) startReceiver(pre func() error) {
	q.rxOwner.Store(rxBackground)
	q.rxLive.Store(true)
	q.tr.setIdle(q.rxIdle)
	q.wg.Add(1)
	go q.receiver(pre)
}

// receiver is the background holder of the receive role.
func (q *qp) receiver(pre func() error) {
	defer q.wg.Done()
	if pre != nil {
		if err := pre(); err != nil {
			q.rxEnd(err)
			return
		}
	}
	for {
		err := q.rxLoop(nil)
		if err != nil && err != errInterrupted {
			return
		}
		// A waiter wants the role: hand it over and tell it. Should it not
		// take the role after all, the handback timer brings us back.
		q.rxWant.Store(false)
		q.rxFreeAt.Store(monotime())
		q.rxOwner.Store(rxFree)
		q.armHandback(rxHandback)
		if c := q.rxWanter.Swap(nil); c != nil {
			c.kick()
		}
		for {
			select {
			case <-q.rxWake:
			case <-q.rxTimer.C:
				q.rxArmed.Store(false)
				// Take over only once the role has been free for
				// rxHandback: a waiter that keeps coming back keeps it.
				if idle := monotime() - q.rxFreeAt.Load(); idle < int64(rxHandback) && q.rxOwner.Load() == rxFree {
					q.armHandback(time.Duration(int64(rxHandback) - idle))
					continue
				}
			case <-q.done:
				return
			}
			if q.rxEnded.Load() {
				return
			}
			if q.rxOwner.CompareAndSwap(rxFree, rxBackground) {
				break
			}
		}
	}
}

// drive is GetEvent's side: with the role taken, read frames until c has
// an event (or is closed), then let go of the role. A read that would
// block polls the transport for up to spin first; drive returns what the
// transport's setSpin reports.
func (q *qp) drive(c *compChannel, spin time.Duration) (polled, parked time.Duration) {
	q.rx.drv = c
	q.tr.setSpin(spin)
	_ = q.rxLoop(c)
	polled, parked = q.tr.setSpin(0)
	q.rx.drv = nil
	q.rxFreeAt.Store(monotime())
	q.rxOwner.Store(rxFree)
	if q.rxEnded.Load() {
		return polled, parked
	}
	if q.rxWant.Load() {
		// Another channel's waiter asked meanwhile.
		if w := q.rxWanter.Swap(nil); w != nil {
			q.rxWant.Store(false)
			w.kick()
		}
	}
	q.armHandback(rxHandback)
	return polled, parked
}

// armHandback makes sure the background receiver looks again within d.
// The timer is left running rather than stopped and reset on every wait,
// which would cost the latency path a timer update each time.
func (q *qp) armHandback(d time.Duration) {
	if !q.rxArmed.Swap(true) {
		q.rxTimer.Reset(d)
	}
}

var procStart = time.Now()

// monotime is a monotonic clock reading in nanoseconds.
func monotime() int64 { return int64(time.Since(procStart)) }

// want asks the background receiver to give the role to c's waiter. It
// does so the next time it runs out of input; until then it delivers
// events through the channel as usual. Interrupting a parked receiver
// instead would cost two wake-ups where waiting costs at most one.
func (q *qp) want(c *compChannel) {
	q.rxWanter.Store(c)
	q.rxWant.Store(true)
}

// rxIdle runs when the role holder is about to block for input: flush a
// coalesced ACK, and between frames give up the wait if the holder has
// something better to do.
func (q *qp) rxIdle(boundary bool) bool {
	r := &q.rx
	if r.owed > 0 {
		// Out of input with requests unacknowledged: ACK them now. When
		// the holder is a GetEvent waiter it stops at the frame that gave
		// it its event, before idling, so that its consumer's reply (sent
		// from the same goroutine, next) carries the ACK.
		r.owed = 0
		q.mu.Lock()
		if q.lastAckSent != q.ackable() {
			q.ackWanted = true
			q.kick()
		}
		q.mu.Unlock()
	}
	if !boundary {
		return false
	}
	q.rxParked.Store(true)
	if q.rxStop() {
		q.rxParked.Store(false)
		return true
	}
	return false
}

// rxStop reports whether the holder should stop reading.
func (q *qp) rxStop() bool {
	if c := q.rx.drv; c != nil {
		return c.nEvents.Load() > 0 || c.isDead() || c.expired.Load()
	}
	return q.rxWant.Load()
}

// rxLoop reads and executes frames until it should stop (errInterrupted
// or nil) or the stream ends (the error, after rxEnd).
func (q *qp) rxLoop(c *compChannel) error {
	for {
		if q.rxStop() {
			if c != nil {
				return nil
			}
			return errInterrupted
		}
		err := q.rxFrame()
		q.rxParked.Store(false)
		if err == errInterrupted {
			continue
		}
		if err != nil {
			if q.rx.gotDisc && (err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)) {
				err = nil
			}
			q.rxEnd(err)
			if err == nil {
				err = io.EOF
			}
			return err
		}
	}
}

// rxEnd tears the engine down once the stream ended. Called by the role
// holder.
func (q *qp) rxEnd(err error) {
	q.rxLive.Store(false)
	q.rxEnded.Store(true)
	q.mu.Lock()
	q.flush(0, 0, false)
	q.txDead = true
	down := q.downNotify
	q.downNotify = nil
	q.mu.Unlock()
	select {
	case q.rxWake <- struct{}{}:
	default:
	}
	if down != nil {
		down(err)
	}
}

// scratch holds the receiver's snapshot of a scatter list, so that it can
// read a payload without holding mu. sg has room for the QP's longest
// scatter list (newQP), not maxSGE: a stream's QP has one SGE a WR, and
// every connection holds its scratch.
type scratch struct {
	sg    [][]byte
	gates []gateRef // sg[i]'s region's fence
	n     int
}

// readInto reads the next total payload bytes into the scratch list's
// slices, in order. fenced reports that one of their regions was
// deregistered meanwhile (fence.go): the bytes from there on were skipped,
// and nothing after the Dereg landed in it.
func (q *qp) readInto(sc *scratch, total int) (fenced bool, err error) {
	defer func() {
		clear(sc.sg[:sc.n])
		clear(sc.gates[:sc.n])
	}()
	left := total
	for i := 0; i < sc.n && left > 0; i++ {
		b := sc.sg[i]
		if len(b) > left {
			b = b[:left]
		}
		err := q.tr.readPayload(b, sc.gates[i])
		left -= len(b)
		if err == errFenced {
			return true, q.tr.discard(left)
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// rxFrame reads and executes one frame.
func (q *qp) rxFrame() error {
	r := &q.rx
	tr := q.tr
	err := tr.readHeader(&r.hb)
	q.rxParked.Store(false) // from here on, events we post need no interrupt
	if err != nil {
		return err
	}
	h := &r.h
	if err := h.decode(&r.hb); err != nil {
		return err
	}
	if q.silent.Load() {
		return tr.discard(h.payloadLen())
	}
	if h.flags&flagAck != 0 && h.typ != frameNak {
		if err := q.onAck(h.ack); err != nil {
			return err
		}
	}
	switch h.typ {
	case frameAck:
	case frameNak:
		return q.onNak(h)
	case frameReadResp:
		return q.onReadResp(h, &r.sc)
	case frameDisc:
		r.gotDisc = true
		q.mu.Lock()
		q.flush(0, 0, false)
		if !q.discWanted {
			q.discWanted = true
			q.kick()
		}
		q.mu.Unlock()
	default:
		executed, err := q.onRequest(h, &r.sc)
		if err != nil {
			return err
		}
		if executed {
			r.owed++
			if r.owed >= q.ackEvery {
				q.mu.Lock()
				q.ackWanted = true
				q.kick()
				q.mu.Unlock()
				r.owed = 0
			}
		}
	}
	return nil
}

// onAck completes send WRs the peer has acknowledged.
func (q *qp) onAck(a uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset || a == q.sqHead {
		return nil
	}
	if seqLT(a, q.sqHead) || seqLT(q.sqSent, a) {
		return errProtocol
	}
	q.progress++
	q.completeTo(a)
	if q.sqSent != q.sqTail {
		q.kick() // a READ slot may have freed up
	}
	return nil
}

func (q *qp) onNak(h *header) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset {
		return nil
	}
	p := h.psn
	if seqLT(p, q.sqHead) || !seqLT(p, q.sqSent) {
		return errProtocol
	}
	q.progress++
	q.completeTo(p)
	if q.state == verbs.QPSErr {
		return nil
	}
	switch h.imm &^ 0xff {
	case nakRNR:
		counters.rnrRecv.Add(1)
		s := q.slot(p)
		s.rnr++
		if q.attr.RNRRetry != 7 && s.rnr > q.attr.RNRRetry {
			counters.rnrRetryExc.Add(1)
			q.flush(p, verbs.WCRNRRetryExcErr, true)
			return nil
		}
		// Go back to p: the responder drops everything after it until p
		// comes again.
		for i := p; i != q.sqSent; i++ {
			if q.slot(i).op == verbs.OpRDMARead {
				q.readsOut--
			}
		}
		counters.retransmits.Add(uint64(q.sqSent - p))
		q.sqSent = p
		q.rnrWait = true
		q.rnrTimer.Reset(rnrDelay(h.imm & 0xff))
	case nakRemAccess:
		q.flush(p, verbs.WCRemAccessErr, true)
	case nakInvReq:
		q.flush(p, verbs.WCRemInvReqErr, true)
	default:
		q.flush(p, verbs.WCRemOpErr, true)
	}
	return nil
}

func (q *qp) onReadResp(h *header, sc *scratch) error {
	q.mu.Lock()
	p := h.psn
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset {
		q.mu.Unlock()
		return q.tr.discard(int(h.len))
	}
	if seqLT(p, q.sqHead) || !seqLT(p, q.sqSent) {
		q.mu.Unlock()
		return errProtocol
	}
	s := q.slot(p)
	if s.op != verbs.OpRDMARead || s.length != h.len {
		q.mu.Unlock()
		return errProtocol
	}
	sc.n = copy(sc.sg, s.sg)
	copy(sc.gates, s.gates)
	q.mu.Unlock()
	fenced, err := q.readInto(sc, int(h.len))
	if err != nil {
		return err
	}
	q.mu.Lock()
	if fenced {
		// The READ's own buffer was deregistered while the response came
		// in: it fails, as a NIC's does, and the QP goes to ERR.
		if q.state != verbs.QPSErr && q.state != verbs.QPSReset && !seqLT(p, q.sqHead) {
			q.progress++
			q.completeTo(p)
			q.flush(p, verbs.WCLocProtErr, true)
		}
		q.mu.Unlock()
		return nil
	}
	if q.state != verbs.QPSErr && q.state != verbs.QPSReset && !seqLT(p, q.sqHead) {
		q.progress++
		q.completeTo(p + 1)
		if q.sqSent != q.sqTail {
			q.kick()
		}
	}
	q.mu.Unlock()
	return nil
}

// nak queues a NAK for the request at the responder's expected PSN. Called
// with mu held.
func (q *qp) nak(syn uint32) {
	q.nakPending = true
	q.nakPSN = q.rcvExpected
	q.nakSyn = syn
	q.kick()
}

// onRequest executes one request frame as the responder. It reports
// whether the request executed (and needs an ACK).
func (q *qp) onRequest(h *header, sc *scratch) (executed bool, err error) {
	q.mu.Lock()
	st := q.state
	if st != verbs.QPSRTR && st != verbs.QPSRTS && st != verbs.QPSSQD {
		// A QP in ERR or RESET drops requests unanswered, as hardware does.
		q.mu.Unlock()
		return false, q.tr.discard(h.payloadLen())
	}
	if h.psn != q.rcvExpected {
		if q.rnrDiscard || seqLT(h.psn, q.rcvExpected) {
			q.mu.Unlock()
			return false, q.tr.discard(h.payloadLen())
		}
		q.mu.Unlock()
		return false, errProtocol
	}
	q.rnrDiscard = false
	needRecv := h.typ == frameSend || h.typ == frameSendImm || h.typ == frameWriteImm
	if needRecv && q.rqHead == q.rqTail {
		q.rnrDiscard = true
		counters.rnrSent.Add(1)
		q.nak(nakRNR | uint32(q.attr.MinRNRTimer&0xff))
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
			q.nak(nakInvReq)
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
				q.nak(nakRemAccess)
				q.mu.Unlock()
				return false, q.tr.discard(h.payloadLen())
			}
		}
	}
	switch h.typ {
	case frameReadReq:
		if q.respTail-q.respHead >= uint32(max(q.attr.MaxDestRdAtomic, 1)) {
			q.flush(0, 0, false)
			q.nak(nakInvReq)
			q.mu.Unlock()
			return false, nil
		}
		if q.respTail-q.respHead == uint32(len(q.resp)) {
			q.growResp()
		}
		q.resp[q.respTail&uint32(len(q.resp)-1)] = readResp{psn: h.psn, data: dst, gate: fence}
		q.respTail++
		q.rcvExpected++
		q.kick()
		q.mu.Unlock()
		return true, nil
	case frameWrite:
		q.mu.Unlock()
		err := q.tr.readPayload(dst, fence)
		if err == errFenced {
			q.mu.Lock()
			q.accessCut()
			q.mu.Unlock()
			return false, nil
		}
		if err != nil {
			return false, err
		}
		q.mu.Lock()
		q.rcvExpected++
		q.mu.Unlock()
		return true, nil
	}
	// SEND, SEND_WITH_IMM, WRITE_WITH_IMM: consume a receive.
	r := q.recvAt(q.rqHead)
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
			q.popRecv()
			wc.Status = bad
			q.rcq.push(&wc, false)
			q.flush(0, 0, false)
			q.nak(syn)
			q.mu.Unlock()
			return false, q.tr.discard(h.payloadLen())
		}
		sc.n = copy(sc.sg, r.sg)
		copy(sc.gates, r.gates)
	}
	q.popRecv()
	q.mu.Unlock()
	var fenced bool
	if h.typ == frameWriteImm {
		if err = q.tr.readPayload(dst, fence); err == errFenced {
			fenced, err = true, nil
		}
	} else {
		fenced, err = q.readInto(sc, int(h.len))
	}
	if err != nil {
		return false, err
	}
	q.mu.Lock()
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
			q.nak(syn)
		}
		q.mu.Unlock()
		return false, nil
	}
	q.rcvExpected++
	if q.state != verbs.QPSErr && q.state != verbs.QPSReset {
		if !q.rcq.push(&wc, h.flags&flagSolicited != 0) {
			q.flush(0, 0, false)
		}
	}
	q.mu.Unlock()
	return true, nil
}

// accessCut fails the request whose target region was deregistered while
// its payload came in (the rest was skipped): a remote access error, as
// when the rkey is no longer there. Called with mu held.
func (q *qp) accessCut() {
	if q.state == verbs.QPSErr || q.state == verbs.QPSReset {
		return
	}
	q.flush(0, 0, false)
	q.nak(nakRemAccess)
}

// disconnect starts an orderly teardown: the QP flushes, a DISC goes to
// the peer, and the receiver ends when the peer's DISC (or the end of the
// stream, or the deadline) arrives.
func (q *qp) disconnect(timeout time.Duration) {
	q.mu.Lock()
	q.flush(0, 0, false)
	if !q.discWanted {
		q.discWanted = true
		q.kick()
	}
	tr := q.tr
	q.mu.Unlock()
	if tr != nil {
		_ = tr.setReadDeadline(time.Now().Add(timeout))
	}
}
