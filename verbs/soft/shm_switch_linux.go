//go:build linux

package soft

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// switchTransport carries a connection whose REP picked
// transportShmSwitch (wire.go): its frames start on the handshake's TCP
// connection at once, while this side's ring exchange runs in the
// background, and each direction moves to shared memory on its own.
//
//   - Sending: once our exchange is through (we have mapped the peer's
//     ring and hold its eventfd), the switch marker goes out on TCP at a
//     frame boundary, and every frame after it goes to the peer's ring.
//     If our exchange fails we keep sending on TCP: the connection works,
//     only slower.
//   - Receiving: the marker, read from TCP, ends the peer's frames there;
//     from then on we read our own ring, which existed before the offer
//     was sent. If our exchange is still under way the reader waits for
//     it (it ends by its deadline); if it failed, the connection fails
//     with an error that says so (rare: the peer got through the same
//     exchange; we lack its eventfd, without which we cannot wake its
//     writer when we free ring space).
//
// A switch happens only at a frame boundary. The engine (engine.go) hands
// writev whole frames (buildBatch), and a call either writes all it was
// given or, when it does not wait, stops short and returns a count below
// the total; the engine then passes exactly the rest to its sender, whose
// next call waits until all of it is written or the transport fails
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

	// The sending side. wmu is held by the writer for a call on TCP and by
	// whoever sends the marker; a writer that may not block only tries it.
	wmu       sync.Mutex
	wr        atomic.Pointer[shmTransport] // set once the marker is out
	wPartial  bool                         // the last call on TCP stopped inside a frame
	wClosed   bool                         // closeWrite was called
	marker    [hdrLen]byte
	markerOff int // bytes of the marker sent
	one       [1][]byte
}

// errShmSwitch: the peer switched to shared memory and this side cannot.
var errShmSwitch = errors.New("soft: the peer moved this connection to shared memory, but this side's ring exchange failed")

// newSwitchTransport starts the connection on tr; the exchange's result,
// when it comes (x), moves it to shared memory.
func newSwitchTransport(tr *tcpTransport, x *shmExchange) *switchTransport {
	s := &switchTransport{tcp: tr, x: x, ready: make(chan struct{}), closing: make(chan struct{})}
	s.marker[0] = frameShmSwitch
	x.onDone(s.activate)
	return s
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
	if st != nil {
		s.trySwitch()
	}
}

// trySwitch sends the marker if no write is under way and the last one
// ended at a frame boundary. It never blocks: if the socket takes only
// part of the marker, a goroutine of its own sends the rest (the peer must
// not be left inside a header).
func (s *switchTransport) trySwitch() {
	if !s.wmu.TryLock() {
		return // the writer looks again when its call ends
	}
	partial := false
	if s.wr.Load() == nil && !s.wPartial && !s.wClosed && s.ok.Load() != nil {
		done, err := s.sendMarker(false)
		partial = err == nil && !done && s.markerOff > 0
	}
	s.wmu.Unlock()
	if partial {
		go s.finishMarker()
	}
}

// finishMarker sends the rest of a marker that the socket took only part
// of, unless a writer did meanwhile.
func (s *switchTransport) finishMarker() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wr.Load() == nil && s.markerOff > 0 {
		if done, err := s.sendMarker(true); done && err == nil && s.wClosed {
			_ = s.wr.Load().closeWrite() // closeWrite came meanwhile
		}
	}
}

// sendMarker sends (the rest of) the marker on TCP; done: it is out, and
// the sending side is on shared memory. Called with wmu held, at a frame
// boundary.
func (s *switchTransport) sendMarker(wait bool) (done bool, err error) {
	s.one[0] = s.marker[s.markerOff:]
	n, err := s.tcp.writev(s.one[:], wait)
	s.one[0] = nil
	s.markerOff += n
	if err != nil || s.markerOff < hdrLen {
		return false, err
	}
	s.wr.Store(s.ok.Load())
	return true, nil
}

func (s *switchTransport) writev(bufs [][]byte, wait bool) (int, error) {
	if w := s.wr.Load(); w != nil {
		return w.writev(bufs, wait)
	}
	if wait {
		s.wmu.Lock()
	} else if !s.wmu.TryLock() {
		return 0, nil // the marker is being sent: nothing fits now
	}
	n, err := s.writevTCP(bufs, wait)
	s.wmu.Unlock()
	if err == nil && s.wr.Load() == nil && s.ok.Load() != nil {
		// The exchange may have finished during the call, its own try
		// failing on wmu: switch now, at the boundary this call ended on.
		s.trySwitch()
	}
	return n, err
}

// writevTCP is writev before the switch; called with wmu held.
func (s *switchTransport) writevTCP(bufs [][]byte, wait bool) (int, error) {
	if !s.wPartial && (s.markerOff > 0 || s.ok.Load() != nil) {
		// At a frame boundary with the exchange through: the marker
		// first, or the rest of it.
		done, err := s.sendMarker(wait)
		if err != nil {
			return 0, err
		}
		if !done {
			return 0, nil // not waiting, and the socket is full
		}
	}
	if w := s.wr.Load(); w != nil {
		return w.writev(bufs, wait)
	}
	n, err := s.tcp.writev(bufs, wait)
	if err == nil {
		total := 0
		for _, b := range bufs {
			total += len(b)
		}
		s.wPartial = n < total
	}
	return n, err
}

func (s *switchTransport) closeWrite() error {
	if w := s.wr.Load(); w != nil {
		return w.closeWrite()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if w := s.wr.Load(); w != nil {
		return w.closeWrite()
	}
	s.wClosed = true
	if s.markerOff > 0 {
		return nil // finishMarker sends the rest, then ends the stream there
	}
	return s.tcp.closeWrite()
}

func (s *switchTransport) readHeader(h *[hdrLen]byte) error {
	if s.rd != nil {
		return s.rd.readHeader(h)
	}
	if err := s.tcp.readHeader(h); err != nil {
		return err
	}
	if h[0] != frameShmSwitch {
		return nil
	}
	if err := s.switchRead(h); err != nil {
		return err
	}
	return s.rd.readHeader(h)
}

// switchRead moves the reading side to our ring at the peer's marker h.
func (s *switchTransport) switchRead(h *[hdrLen]byte) error {
	if !isShmSwitch(h) || s.tcp.buffered() {
		return errProtocol // a malformed marker, or frames after it on TCP
	}
	select {
	case <-s.ready:
	case <-s.closing:
		return net.ErrClosed
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
	return nil
}

func (s *switchTransport) readPayload(dst []byte) error {
	if s.rd != nil {
		return s.rd.readPayload(dst)
	}
	return s.tcp.readPayload(dst)
}

func (s *switchTransport) discard(n int) error {
	if s.rd != nil {
		return s.rd.discard(n)
	}
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
func (s *switchTransport) ackEvery(def int) int { return max(1, min(def, shmAckEvery)) }
