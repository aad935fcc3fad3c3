package soft

import (
	"errors"
	"io"
	"sync/atomic"
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
// Receive: whoever holds the receive role (see rxRole below: the QP's
// receiver goroutine, or a goroutine waiting in GetEvent) reads frames,
// executes requests against registered memory, and generates completions
// and coalesced ACKs (when it runs out of input, or every ackEvery
// requests; an ACK also rides on every frame we send). Where both sides
// agreed to delayed ACKs, one that runs out of input waits up to ackDelay
// for a frame to ride on instead, unless a request asked for it at once
// (responder.go).

// start attaches a transport and starts the sender; the receiver starts
// with startReceiver once the handshake is complete.
func (q *qp) start(tr transport, peer *hsMsg, down func(error)) {
	q.mu.Lock()
	q.tr = tr
	q.downNotify = down
	q.attr.DestQPNum = peer.qpn
	q.delayedAcks = peer.delayedAcks
	if q.delayedAcks {
		q.rcv.delayAcks()
	}
	q.rcv.ackEvery = max(1, min(16, int(peer.sqDepth)/4))
	if h, ok := tr.(interface{ ackEvery(int) int }); ok {
		q.rcv.ackEvery = h.ackEvery(q.rcv.ackEvery) // a transport where ACKs are cheap asks for more
	}
	if b, ok := tr.(interface{ buffered() bool }); ok && q.delayedAcks {
		q.rx.buffered = b.buffered
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
	q.rxRole.timer.Stop()
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
		piped := q.batch.piped
		q.snd.inl.writing = true
		q.mu.Unlock()
		setPipelined(tr, piped)
		n, err := tr.writev(v, g, false)
		q.mu.Lock()
		if err != nil {
			q.txFailed(err)
			return
		}
		if rest := trimVec(v, n); len(rest) > 0 {
			q.handOff(rest, g[len(v)-len(rest):]) // the sender writes on
			return
		}
		q.snd.inl.written()
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
	q.snd.inl.written()
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
		piped := q.batch.piped // of the batch v came from, or was just built
		q.snd.inl.writing = true
		q.mu.Unlock()
		setPipelined(tr, piped)
		_, err := tr.writev(v, g, true)
		q.mu.Lock()
		v, g = nil, nil
		if err != nil {
			q.txFailed(err)
			return
		}
		q.snd.inl.written()
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

// batch is the transmit batch: the frames to write next as iovecs (v),
// beside each the fence of the region it lies in (vg), their headers
// encoded in hdrs. Its arrays are reused from batch to batch; the transmit
// role's holder builds it (buildBatch), with mu held.
type batch struct {
	hdrs  [][hdrLen]byte
	v     [][]byte
	vg    []gateRef // v[i]'s region's or window's fence, zero for headers and inline data
	nh    int       // headers used
	bytes int
	piped bool // carries a large READ response (pipeliner)
}

// setFrames sizes the batch: n frame headers and room for their iovecs,
// each frame with up to sge of them. Called between batches.
func (b *batch) setFrames(n, sge int) {
	b.hdrs = make([][hdrLen]byte, n)
	b.v = make([][]byte, 0, n*(1+sge)+8)
	b.vg = make([]gateRef, 0, cap(b.v))
}

// room reports whether the batch takes another frame.
func (b *batch) room() bool { return b.nh < len(b.hdrs) }

// frame takes the next header slot for a frame, its bytes added to the
// batch; the caller encodes the header into it (h.encode(b.frame())), so
// that both inline on the per-frame path.
func (b *batch) frame() *[hdrLen]byte {
	hb := &b.hdrs[b.nh]
	b.nh++
	b.bytes += hdrLen
	b.v = append(b.v, hb[:])
	b.vg = append(b.vg, gateRef{})
	return hb
}

// payload adds a frame's payload, p, from the region fence guards.
func (b *batch) payload(p [][]byte, fences []gateRef, n int) {
	b.v = append(b.v, p...)
	b.vg = append(b.vg, fences...)
	b.bytes += n
}

// buildBatch collects the frames to write next into q.batch: the
// responder's READ responses and NAK, the requester's requests (each
// carrying the current ACK), a DISC, and a standalone ACK if one is wanted
// and nothing else carried it. It returns the batch's iovecs, their
// fences and its length. Called with mu held by the transmit role's
// holder.
func (q *qp) buildBatch() ([][]byte, []gateRef, int) {
	if q.txDead || q.discSent {
		return nil, nil, 0
	}
	b := &q.batch
	b.v, b.vg, b.nh, b.bytes, b.piped = b.v[:0], b.vg[:0], 0, 0, false
	q.rcv.appendResponses(b)
	ack := q.rcv.ackable()
	carried := q.state == verbs.QPSRTS && !q.discWanted && q.snd.appendRequests(b, ack)
	if q.snd.pokeWanted && b.room() {
		// The requester needs an ACK of requests it sent without asking
		// and none of this batch asked: an ACK of ours that asks.
		q.snd.pokeWanted = false
		if q.state == verbs.QPSRTS && !q.discWanted {
			h := header{typ: frameAck, flags: flagAck | flagAckReq, ack: ack}
			h.encode(b.frame())
			carried = true
		}
	}
	if q.discWanted && b.room() {
		// The DISC carries the ACK (a delayed one would not follow it).
		h := header{typ: frameDisc, flags: flagAck, ack: ack}
		h.encode(b.frame())
		q.discSent = true
		carried = true
	}
	q.rcv.appendAck(b, ack, carried, !q.discSent)
	if q.preamble != nil && (b.nh > 0 || q.preambleDue) {
		b.v, b.vg = append(b.v, nil), append(b.vg, gateRef{})
		copy(b.v[1:], b.v)
		copy(b.vg[1:], b.vg)
		b.v[0], b.vg[0] = q.preamble, gateRef{}
		b.bytes += len(q.preamble)
		q.preamble = nil
		q.preambleTimer.Stop()
	}
	q.framesSent += uint64(b.nh)
	v, vg := b.v, b.vg
	b.v, b.vg = v[:0], vg[:0]
	if len(b.hdrs) < maxBatchFrames && (b.nh == len(b.hdrs) || cap(v)-len(v) < 1+q.cap.MaxSendSGE) {
		// Full: the next batches may take more. v keeps the arrays it was
		// built in until it is written.
		b.setFrames(min(2*len(b.hdrs), maxBatchFrames), q.cap.MaxSendSGE)
	}
	return v, vg, b.bytes
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
//
// The handback timer's expiry wakes the background receiver, a goroutine
// switch that a waiter which has come back since pays for nothing. While
// its expiries keep finding the role taken again, the timer's period
// doubles, up to rxHandbackMax, and falls back to rxHandback once the
// background takes the role: a ping-pong's QP, whose waiter is back within
// a round trip, is woken for nothing every 4 ms rather than every 1 (8
// connections on 2 CPUs: a wake-up every 5 round trips of each side
// became one every 20).
//
// How long the role must stay free before the background takes it is
// learned too (rxRole.idleNeed): each time a waiter wants the role back
// from the background before the background read a frame, the need
// doubles, up to rxIdleMax, and it falls back to rxHandback once the
// background reads one first. A connection that answers a request every
// few milliseconds (a quiet redis GET) had the background take the role
// in every gap and hand it back at every request: a wake-up, a sleep on
// the transport and an interrupt a request, 1.5-2x TCP's CPU per request
// over shared memory, 0.9x with the need learned (bench/'s redis-get-quiet;
// docs/measurements/2026-11-29-shm-app-cpu.md). Input that comes while
// nobody holds the role (an ACK, a one-sided operation to a program busy
// elsewhere) waits for rxIdleMax at most, once.
const (
	rxFree        = 0
	rxBackground  = 1
	rxApp         = 2
	rxHandback    = time.Millisecond
	rxHandbackMax = 4 * rxHandback
	rxIdleMax     = 32 * rxHandback
)

// rxState is the receive loop's state; only the role holder touches it.
type rxState struct {
	hb      [hdrLen]byte
	h       header
	sc      scratch
	owed    int  // requests executed since we last asked for an ACK
	ackReq  bool // a frame since then asked for a prompt ACK (flagAckReq)
	gotDisc bool
	served  uint64       // frames the background read while no waiter wanted the role
	drv     *compChannel // the channel whose waiter holds the role
	// buffered reports whether the transport holds input already read:
	// the rest of the batch the last read brought (TCP; nil elsewhere).
	buffered func() bool
}

// rxRole is who holds the receive role, and the hand-over between the
// background receiver and GetEvent waiters. Its fields are atomics, or
// made once (init), so that they are read without mu.
type rxRole struct {
	owner  atomic.Int32                // rxFree, rxBackground or rxApp
	wanted atomic.Bool                 // a waiter asked the background for the role (want)
	wanter atomic.Pointer[compChannel] // whose waiter asked
	parked atomic.Bool                 // the holder is blocked reading, between frames
	live   atomic.Bool                 // the receiver runs
	ended  atomic.Bool                 // the stream ended (rxEnd)
	wake   chan struct{}               // wakes the background receiver
	timer  *time.Timer                 // the handback timer (armHandback)
	armed  atomic.Bool                 // timer is running
	freeAt atomic.Int64                // monotime when a waiter last let go of the role
	period atomic.Int64                // the handback timer's next period (rxHandback..rxHandbackMax), 0: rxHandback
	need   atomic.Int64                // how long the role stays free before the background takes it (rxHandback..rxIdleMax), 0: rxHandback
	fired  atomic.Uint64               // the handback timer's expiries (the background's wake-ups by it)
	takes  atomic.Uint64               // the background's take-overs of the role after a waiter let it go
}

// init makes the role's channel and its stopped timer.
func (r *rxRole) init() {
	r.wake = make(chan struct{}, 1)
	r.timer = time.NewTimer(time.Hour)
	r.timer.Stop()
}

// startReceiver starts the background receiver; pre (the handshake's last
// step) runs first.
func (q *qp) startReceiver(pre func() error) {
	q.rxRole.owner.Store(rxBackground)
	q.rxRole.live.Store(true)
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
		served := q.rx.served
		err := q.rxLoop(nil)
		if err != nil && err != errInterrupted {
			return
		}
		q.rxRole.learn(q.rx.served != served)
		// A waiter wants the role: hand it over and tell it. Should it not
		// take the role after all, the handback timer brings us back.
		q.rxRole.wanted.Store(false)
		q.rxRole.freeAt.Store(monotime())
		q.rxRole.owner.Store(rxFree)
		q.rxRole.armHandback(rxHandback)
		if c := q.rxRole.wanter.Swap(nil); c != nil {
			c.kick()
		}
		for {
			select {
			case <-q.rxRole.wake:
			case <-q.rxRole.timer.C:
				q.rxRole.armed.Store(false)
				q.rxRole.fired.Add(1)
				// Take over only once the role has been free for
				// idleNeed: a waiter that keeps coming back keeps it.
				need := q.rxRole.idleNeed()
				if idle := time.Duration(monotime() - q.rxRole.freeAt.Load()); idle < need && q.rxRole.owner.Load() == rxFree {
					q.rxRole.lengthen()
					q.rxRole.armHandback(min(need-idle, rxHandbackMax))
					continue
				}
				if q.rxRole.owner.Load() == rxApp {
					q.rxRole.lengthen()
				}
			case <-q.done:
				return
			}
			if q.rxRole.ended.Load() {
				return
			}
			if q.rxRole.owner.CompareAndSwap(rxFree, rxBackground) {
				q.rxRole.period.Store(int64(rxHandback))
				q.rxRole.takes.Add(1)
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
	var free int64
	if t, ok := q.tr.(*tcpTransport); ok {
		free = t.wokeAt()
	}
	if free == 0 {
		free = monotime()
	}
	polled, parked = q.tr.setSpin(0)
	q.rx.drv = nil
	q.rxRole.freeAt.Store(free)
	q.rxRole.owner.Store(rxFree)
	if q.rxRole.ended.Load() {
		return polled, parked
	}
	if q.rxRole.wanted.Load() {
		// Another channel's waiter asked meanwhile.
		if w := q.rxRole.wanter.Swap(nil); w != nil {
			q.rxRole.wanted.Store(false)
			w.kick()
		}
	}
	q.rxRole.armHandback(q.rxRole.handback())
	return polled, parked
}

// handback is the period the handback timer is armed with when a waiter
// lets go of the role.
func (r *rxRole) handback() time.Duration {
	if d := r.period.Load(); d > 0 {
		return time.Duration(d)
	}
	return rxHandback
}

// idleNeed is how long the role must have been free before the background
// takes it.
func (r *rxRole) idleNeed() time.Duration {
	if d := r.need.Load(); d > 0 {
		return time.Duration(d)
	}
	return rxHandback
}

// learn takes in how the background's hold of the role ended: served, it
// read a frame before a waiter wanted the role back (the take-over was
// needed: the need falls back to rxHandback), or not (the waiter was back
// first, and would have read what came itself: the need doubles, up to
// rxIdleMax). Called by the background.
func (r *rxRole) learn(served bool) {
	if served {
		r.need.Store(int64(rxHandback))
		return
	}
	r.need.Store(int64(min(2*r.idleNeed(), rxIdleMax)))
}

// lengthen doubles the handback timer's period, up to rxHandbackMax: its
// expiry found a waiter back. Called by the background receiver.
func (r *rxRole) lengthen() {
	r.period.Store(int64(min(2*r.handback(), rxHandbackMax)))
}

// armHandback makes sure the background receiver looks again within d.
// The timer is left running rather than stopped and reset on every wait,
// which would cost the latency path a timer update each time.
func (r *rxRole) armHandback(d time.Duration) {
	if !r.armed.Load() && !r.armed.Swap(true) { // a load first: it is mostly armed
		r.timer.Reset(d)
	}
}

var procStart = time.Now()

// monotime is a monotonic clock reading in nanoseconds.
func monotime() int64 { return int64(time.Since(procStart)) }

// want asks the background receiver to give the role to c's waiter. It
// does so the next time it runs out of input; until then it delivers
// events through the channel as usual. Interrupting a parked receiver
// instead would cost two wake-ups where waiting costs at most one.
func (r *rxRole) want(c *compChannel) {
	r.wanter.Store(c)
	r.wanted.Store(true)
}

// rxIdle runs when the role holder is about to block for input: flush a
// coalesced ACK, and between frames give up the wait if the holder has
// something better to do.
func (q *qp) rxIdle(boundary bool) bool {
	r := &q.rx
	if r.owed > 0 || r.ackReq {
		// Out of input with requests unacknowledged: ACK them now, or
		// soon where ACKs are delayed (idleAck). When the holder is a
		// GetEvent waiter it stops at the frame that gave it its event,
		// before idling, so that its consumer's reply (sent from the same
		// goroutine, next) carries the ACK.
		// Requests the count rule left to the end of their batch
		// (rxFrame) are owed an ACK at once, as they would have had it.
		prompt := r.ackReq || r.owed >= q.rcv.ackEvery
		r.owed, r.ackReq = 0, false
		q.mu.Lock()
		q.rcv.idleAck(prompt)
		q.mu.Unlock()
	}
	if !boundary {
		return false
	}
	q.rxRole.parked.Store(true)
	if q.rxStop() {
		q.rxRole.parked.Store(false)
		return true
	}
	return false
}

// rxStop reports whether the holder should stop reading.
func (q *qp) rxStop() bool {
	if c := q.rx.drv; c != nil {
		return c.nEvents.Load() > 0 || c.isDead() || c.expired.Load()
	}
	return q.rxRole.wanted.Load()
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
		err := q.rxFrame() // which clears parked
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
		if c == nil && !q.rxRole.wanted.Load() {
			q.rx.served++
		}
	}
}

// rxEnd tears the engine down once the stream ended. Called by the role
// holder.
func (q *qp) rxEnd(err error) {
	q.rxRole.live.Store(false)
	q.rxRole.ended.Store(true)
	q.mu.Lock()
	q.flush(0, 0, false)
	q.txDead = true
	down := q.downNotify
	q.downNotify = nil
	q.mu.Unlock()
	select {
	case q.rxRole.wake <- struct{}{}:
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

// readFrom reads the next total payload bytes from tr into the scratch
// list's slices, in order. fenced reports that one of their regions was
// deregistered meanwhile (fence.go): the bytes from there on were skipped,
// and nothing after the Dereg landed in it.
func (sc *scratch) readFrom(tr transport, total int) (fenced bool, err error) {
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
		err := tr.readPayload(b, sc.gates[i])
		left -= len(b)
		if err == errFenced {
			return true, tr.discard(left)
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
	if q.rxRole.parked.Load() {
		// From here on, events we post need no interrupt. Only the holder
		// stores parked: a load spares the store (a locked instruction on
		// amd64) for the frames read without a park between.
		q.rxRole.parked.Store(false)
	}
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
	if h.flags&flagAckReq != 0 {
		r.ackReq = true
	}
	if h.flags&flagAck != 0 && h.typ != frameNak {
		if err := q.snd.onAck(h.ack); err != nil {
			return err
		}
	}
	switch h.typ {
	case frameAck:
	case frameNak:
		return q.snd.onNak(h)
	case frameReadResp:
		return q.snd.onReadResp(h, &r.sc)
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
		executed, err := q.rcv.onRequest(h, &r.sc)
		if err != nil {
			return err
		}
		if executed {
			r.owed++
			// Where ACKs are delayed, the every-ackEvery ACK waits for
			// the end of the batch the last read brought: one ACK frame
			// (one write, one wake-up of the peer) per batch read, not
			// per ackEvery requests in it, as TCP's delayed ACK answers
			// a run of segments read at once. The batch is bounded: the
			// peer sends no more than its send queue holds unacknowledged.
			if r.owed >= q.rcv.ackEvery && (r.buffered == nil || !r.buffered()) {
				q.mu.Lock()
				q.rcv.wantAck()
				q.mu.Unlock()
				r.owed = 0
			}
		}
	}
	return nil
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
