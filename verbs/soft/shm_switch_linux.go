//go:build linux

package soft

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// switchTransport carries a connection whose REP picked
// transportShmSwitch (wire.go): its frames start on the handshake's TCP
// connection at once, and the connection moves to shared memory in the
// background once it has carried SetSharedMemorySwitch's bytes, or its
// active side has received SetSharedMemorySwitchFrames' frames, whichever
// comes first (switchRule; counted by the active side, which sees both
// directions):
//
//   - The active side opens the offer's unix socket (its ring is made
//     there, while the peer answers) and sends an invitation on TCP: a
//     control header of type frameShmSwitch, kind shmInvite.
//   - The passive side, reading it, runs its half of the ring exchange
//     (shmAnswerSwitch) in a goroutine of its own.
//   - Sending: once a side's exchange is through (it has mapped the
//     peer's ring and holds its eventfd), its switch marker (kind
//     shmMarker) goes out on TCP at a frame boundary, and every frame
//     after it goes to the peer's ring. If the exchange fails, that side
//     keeps sending on TCP: the connection works, only slower.
//   - Receiving: the marker, read from TCP, ends the peer's frames there;
//     from then on we read our own ring. A marker before the invitation
//     (to the passive side not yet invited, or to the active side that
//     has not opened its offer to invite) is a protocol error: an honest
//     peer's exchange cannot have started. If our exchange is still under way
//     the reader waits for it, at most switchWait (it ends by its own
//     deadline before); if it failed, or is not through by then, the
//     connection fails with an error that says so (rare: the peer got
//     through the same exchange; we lack its eventfd, without which we
//     cannot wake its writer when we free ring space).
//
// Control headers go out only at a frame boundary. The engine (engine.go)
// hands writev whole frames (buildBatch), and a call either writes all it
// was given or, when it does not wait, stops short and returns a count
// below the total; the engine then passes exactly the rest to its sender,
// whose next call waits until all of it is written or the transport fails
// (kick, handOff, sender). So a call that follows a complete one starts at
// a frame boundary: wPartial tracks whether the last call was complete.
//
// Once a direction has switched, the calls go straight to the
// shmTransport (one atomic load more than on a plain shmTransport); the
// TCP connection stays as shmTransport's liveness watch, which starts
// reading it only once our reading side has switched (nothing else comes
// on TCP after the peer's marker).
type switchTransport struct {
	tcp     *tcpTransport
	x       *shmExchange
	ready   chan struct{} // closed once our exchange's result is in: ok or xerr set
	closing chan struct{} // closed by close
	ok      atomic.Pointer[shmTransport]

	// The active side: the offer to open, when (rule), and the bytes moved
	// and frames received on TCP.
	offer   *shmOffer
	rule    switchRule
	born    int64 // monotime when the connection was set up
	moved   atomic.Int64
	frames  atomic.Int64
	started atomic.Bool // the offer is open (or failed to open)
	invite  atomic.Bool // the invitation is to be sent
	// The passive side: runs our half of the exchange, once invited.
	answer   func()
	answered bool // reader only

	// mu orders the reading side's switch against what other goroutines
	// forward to whichever side reads (interrupt, setReadDeadline), and
	// the exchange's result against close.
	mu     sync.Mutex
	xerr   error
	closed bool
	rdl    time.Time // the engine's read deadline
	onIdle func(boundary bool) bool
	rd     *shmTransport // set by the reader (under mu) at the marker
	rdOn   atomic.Bool   // rd is set (for Carrier)
	noted  atomic.Bool   // the move to shared memory was reported (observe_linux.go)

	// The sending side. wmu is held by the writer for a call on TCP and by
	// whoever sends a control header; a writer that may not block only
	// tries it.
	wmu      sync.Mutex
	wr       atomic.Pointer[shmTransport] // set once the marker is out
	wPartial bool                         // the last call on TCP stopped inside a frame
	wClosed  bool                         // closeWrite was called
	wEnded   bool                         // the stream was ended (closeWrite done)
	invited  bool                         // the invitation is out
	ctl      [hdrLen]byte                 // the control header being sent
	ctlOff   int                          // bytes of it sent; 0: none under way
	one      [1][]byte
}

// errShmSwitch: the peer switched to shared memory and this side cannot.
var errShmSwitch = errors.New("soft: the peer moved this connection to shared memory, but this side's ring exchange failed")

// newSwitchTransport starts the connection on tr; the exchange's result,
// when it comes (x), moves it to shared memory.
func newSwitchTransport(tr *tcpTransport, x *shmExchange) *switchTransport {
	s := &switchTransport{tcp: tr, x: x, ready: make(chan struct{}), closing: make(chan struct{})}
	x.onDone(s.activate)
	return s
}

// newSwitchActive is the active side's: it opens the offer and invites
// the peer once the connection has reached rule.
func newSwitchActive(tr *tcpTransport, o *shmOffer, rule switchRule) *switchTransport {
	s := newSwitchTransport(tr, o.x)
	s.offer, s.rule, s.born = o, rule, monotime()
	if rule.immediate() {
		s.start()
	}
	return s
}

// newSwitchPassive is the passive side's, for the REQ req: the active
// side's invitation starts our half of the exchange.
func newSwitchPassive(tr *tcpTransport, req *hsMsg, x *shmExchange) *switchTransport {
	s := newSwitchTransport(tr, x)
	offer := hsMsg{transports: req.transports, ext: bytes.Clone(req.ext)}
	c := tr.c
	s.answer = func() {
		go shmAnswerSwitch(&offer, c, time.Now().Add(shmSetupTimeout), x)
	}
	return s
}

// count adds n bytes moved on TCP (the active side) and starts the move to
// shared memory when the connection reaches its rule.
func (s *switchTransport) count(n int) {
	if s.offer == nil || s.started.Load() {
		return
	}
	if s.rule.due(s.moved.Add(int64(n)), s.frames.Load(), s.age) {
		s.start()
	}
}

// age is how long the connection has lived.
func (s *switchTransport) age() time.Duration { return time.Duration(monotime() - s.born) }

// countFrame adds a frame received on TCP (the active side's reader) and
// its header's bytes.
func (s *switchTransport) countFrame() {
	if s.offer == nil || s.started.Load() {
		return
	}
	if s.rule.due(s.moved.Add(hdrLen), s.frames.Add(1), s.age) {
		s.start()
	}
}

// start opens the offer's socket and has the invitation sent (the active
// side, once).
func (s *switchTransport) start() {
	if !s.started.CompareAndSwap(false, true) {
		return
	}
	if err := s.offer.listen(time.Now().Add(shmSetupTimeout)); err != nil {
		s.x.deliver(shmResult{err: err}) // we stay on TCP
		return
	}
	s.invite.Store(true)
	s.trySend()
}

// activate takes our exchange's result: the rings become a shmTransport,
// ready for the reading side's switch, and the sending side switches now
// if no write is under way (or else right after it).
func (s *switchTransport) activate(r shmResult) {
	var st *shmTransport
	err := r.err
	if err == nil {
		st, err = newShmTransport(s.tcp.c, r.local, r.peer)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if st != nil {
			st.close()
		}
		return
	}
	if err != nil {
		s.xerr = err
	} else {
		s.ok.Store(st)
	}
	close(s.ready)
	s.mu.Unlock()
	if err != nil {
		s.noteCarrier(err)
	}
	if st != nil {
		s.trySend()
	}
}

// due reports whether a control header is to go out next (the rest of one
// under way, the invitation, or the marker), and prepares it. Called with
// wmu held.
func (s *switchTransport) due() bool {
	switch {
	case s.ctlOff > 0:
		return true
	case s.wClosed || s.wr.Load() != nil:
		return false
	case s.invite.Load() && !s.invited:
		s.ctl = [hdrLen]byte{frameShmSwitch, shmInvite}
		return true
	case s.ok.Load() != nil:
		s.ctl = [hdrLen]byte{frameShmSwitch, shmMarker}
		return true
	}
	return false
}

// sendCtl sends (the rest of) the due control header on TCP; done: it is
// out (after the marker, the sending side is on shared memory). Called
// with wmu held, at a frame boundary.
func (s *switchTransport) sendCtl(wait bool) (done bool, err error) {
	s.one[0] = s.ctl[s.ctlOff:]
	n, err := s.tcp.writev(s.one[:], nil, wait)
	s.one[0] = nil
	s.ctlOff += n
	if err != nil || s.ctlOff < hdrLen {
		return false, err
	}
	s.ctlOff = 0
	if s.ctl[1] == shmInvite {
		s.invited = true
	} else {
		s.wr.Store(s.ok.Load())
		s.noteCarrier(nil)
	}
	return true, nil
}

// sendDue sends the due control headers. It reports false when one is
// left (not waiting, the socket full) or failed.
func (s *switchTransport) sendDue(wait bool) (bool, error) {
	for !s.wPartial && s.due() {
		if done, err := s.sendCtl(wait); !done || err != nil {
			return false, err
		}
	}
	return true, nil
}

// trySend sends what control headers are due if no write is under way and
// the last one ended at a frame boundary. It never blocks: if the socket
// takes only part of a header, a goroutine of its own sends the rest (the
// peer must not be left inside a header).
func (s *switchTransport) trySend() {
	if !s.wmu.TryLock() {
		return // the writer looks again when its call ends
	}
	_, err := s.sendDue(false)
	partial := err == nil && s.ctlOff > 0
	s.wmu.Unlock()
	if partial {
		go s.finishCtl()
	}
}

// finishCtl sends the rest of a control header that the socket took only
// part of (unless a writer did meanwhile), and what follows it, and ends
// the stream if closeWrite came meanwhile.
func (s *switchTransport) finishCtl() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if ok, err := s.sendDue(true); ok && err == nil && s.wClosed && !s.wEnded {
		_ = s.endStream()
	}
}

// endStream ends our sending direction where it is. Called with wmu held.
func (s *switchTransport) endStream() error {
	s.wEnded = true
	if w := s.wr.Load(); w != nil {
		return w.closeWrite()
	}
	return s.tcp.closeWrite()
}

func (s *switchTransport) writev(bufs [][]byte, gates []gateRef, wait bool) (int, error) {
	if w := s.wr.Load(); w != nil {
		return w.writev(bufs, gates, wait)
	}
	if wait {
		s.wmu.Lock()
	} else if !s.wmu.TryLock() {
		return 0, nil // a control header is being sent: nothing fits now
	}
	n, err := s.writevTCP(bufs, gates, wait)
	s.wmu.Unlock()
	if err == nil && s.wr.Load() == nil && (s.ok.Load() != nil || s.invite.Load()) {
		// A control header may have become due during the call, whoever
		// made it so finding wmu taken: send it now, at the boundary
		// this call ended on.
		s.trySend()
	}
	return n, err
}

// writevTCP is writev before the switch; called with wmu held.
func (s *switchTransport) writevTCP(bufs [][]byte, gates []gateRef, wait bool) (int, error) {
	if ok, err := s.sendDue(wait); err != nil || !ok {
		return 0, err // not waiting, and the socket is full
	}
	if w := s.wr.Load(); w != nil {
		return w.writev(bufs, gates, wait)
	}
	n, err := s.tcp.writev(bufs, gates, wait)
	if err == nil {
		total := 0
		for _, b := range bufs {
			total += len(b)
		}
		s.wPartial = n < total
	}
	s.count(n)
	return n, err
}

func (s *switchTransport) closeWrite() error {
	if w := s.wr.Load(); w != nil {
		return w.closeWrite()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wClosed = true
	if s.ctlOff > 0 {
		return nil // finishCtl sends the rest, then ends the stream
	}
	return s.endStream()
}

func (s *switchTransport) readHeader(h *[hdrLen]byte) error {
	if s.rd != nil {
		return s.rd.readHeader(h)
	}
	for {
		if err := s.tcp.readHeader(h); err != nil {
			return err
		}
		if h[0] != frameShmSwitch {
			s.countFrame()
			return nil
		}
		if !isShmSwitch(h) || s.tcp.buffered() && h[1] == shmMarker {
			return errProtocol // a malformed header, or frames after the marker on TCP
		}
		if h[1] == shmInvite {
			if s.answer == nil || s.answered {
				return errProtocol // only to the passive side, once
			}
			s.answered = true
			s.answer()
			continue
		}
		if s.answer != nil && !s.answered || s.offer != nil && !s.started.Load() {
			return errProtocol // a marker before the invitation
		}
		if err := s.switchRead(); err != nil {
			return err
		}
		return s.rd.readHeader(h)
	}
}

// switchWait bounds the reading side's wait, at the peer's marker, for our
// exchange's result. The exchange started before the marker could come (the
// active side's at its invitation, the passive side's when invited) and
// ends by its own deadline, shmSetupTimeout after it started; this bound
// holds however it ends, and whatever the peer does meanwhile.
var switchWait = shmSetupTimeout

// errSwitchWait: the reading side's wait for its exchange, at the peer's
// marker, passed switchWait.
var errSwitchWait = fmt.Errorf("%w (not through in time)", errShmSwitch)

// switchRead moves the reading side to our ring at the peer's marker.
func (s *switchTransport) switchRead() error {
	select {
	case <-s.ready:
	case <-s.closing:
		return net.ErrClosed
	default:
		t := time.NewTimer(switchWait)
		select {
		case <-s.ready:
			t.Stop()
		case <-s.closing:
			t.Stop()
			return net.ErrClosed
		case <-t.C:
			return errSwitchWait
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	st := s.ok.Load()
	if st == nil {
		return fmt.Errorf("%w: %v", errShmSwitch, s.xerr)
	}
	st.setIdle(s.onIdle)
	_ = st.setReadDeadline(s.rdl)
	// The TCP connection is the watch's from now on: no deadline on it,
	// and an interrupt it holds goes to the ring's reader.
	_ = s.tcp.setReadDeadline(time.Time{})
	if s.tcp.takeInterrupt() {
		st.interrupt()
	}
	s.tcp.dropBuffer()
	s.rd = st
	s.rdOn.Store(true)
	s.noteCarrier(nil)
	return nil
}

func (s *switchTransport) readPayload(dst []byte, g gateRef) error {
	if s.rd != nil {
		return s.rd.readPayload(dst, g)
	}
	s.count(len(dst))
	return s.tcp.readPayload(dst, g)
}

// holds asks the side that reads. On TCP, only once the active side's
// rule no longer needs counting what is read: readPayload's count may
// start the switch there (open the offer's socket, send the invitation),
// which is not work for under the QP's lock.
func (s *switchTransport) holds(n int) bool {
	if s.rd != nil {
		return s.rd.holds(n)
	}
	if s.offer != nil && !s.started.Load() {
		return false
	}
	return s.tcp.holds(n)
}

func (s *switchTransport) discard(n int) error {
	if s.rd != nil {
		return s.rd.discard(n)
	}
	s.count(n)
	return s.tcp.discard(n)
}
func (s *switchTransport) setIdle(f func(bool) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onIdle = f
	s.tcp.setIdle(f)
	if s.rd != nil {
		s.rd.setIdle(f)
	}
}

// setSpin goes to the transport that reads now (the ring's reader spins
// by its own rule). Only the role holder reads s.rd, and calls this.
func (s *switchTransport) setSpin(d time.Duration) (polled, parked time.Duration) {
	if s.rd != nil {
		return s.rd.setSpin(d)
	}
	return s.tcp.setSpin(d)
}

func (s *switchTransport) interrupt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rd != nil {
		s.rd.interrupt()
	} else {
		s.tcp.interrupt()
	}
}

func (s *switchTransport) setReadDeadline(d time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rdl = d
	if s.rd != nil {
		return s.rd.setReadDeadline(d)
	}
	return s.tcp.setReadDeadline(d)
}

func (s *switchTransport) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	st := s.ok.Load()
	s.mu.Unlock()
	close(s.closing)
	s.x.drop()
	err := s.tcp.close()
	if st != nil {
		_ = st.close()
	}
	return err
}

// carrier is "shm" once both directions of this end are on shared memory.
func (s *switchTransport) carrier() string {
	if s.wr.Load() != nil && s.rdOn.Load() {
		return "shm"
	}
	return "tcp"
}

// ackEvery is the shared-memory path's: the connection is on its way
// there.
func (s *switchTransport) ackEvery(def int) int { return (*shmTransport).ackEvery(nil, def) }

// pipeline passes the hint on to shared memory once writes go there.
func (s *switchTransport) pipeline(on bool) {
	if w := s.wr.Load(); w != nil {
		w.pipeline(on)
	}
}
