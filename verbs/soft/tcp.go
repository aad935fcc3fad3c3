package soft

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tcpTransport carries frames on the TCP connection that carried the
// handshake. Reads go through a buffer for headers and small payloads, and
// straight into the destination (readv of the destination and the buffer)
// for the rest; writes are one writev of headers and registered memory.
// Both use the socket's raw fd through syscall.RawConn, so that waiting
// parks on Go's poller and a non-blocking attempt is possible.
//
// The socket is non-blocking: a read or write never sleeps in the kernel,
// so they are raw system calls, without the scheduler's bookkeeping around
// a call that may block. That bookkeeping wakes the runtime's monitor
// thread (a futex call each way) on a goroutine's first call after an idle
// spell, which on the latency path is every call after a wake-up, and lets
// the monitor hand our P to another thread during a long copy.
type tcpTransport struct {
	c  *net.TCPConn
	rc syscall.RawConn

	// Read side, used by one goroutine. buf is big, borrowed from tcpBufs,
	// while the reader is busy, and small while it sleeps with nothing
	// buffered: an idle connection holds no big buffer.
	buf      []byte
	big      *[tcpBufSize]byte
	small    [tcpSmallBuf]byte
	r, w     int
	riov     [2]unix.Iovec
	rcnt     int
	rn       int
	rerr     error
	readFn   func(fd uintptr) bool
	onIdle   func(boundary bool) bool
	rwait    bool
	idled    bool
	boundary bool // the current read is between frames
	// The polling's state, kept beside the flags above, where the struct
	// has room: spinning, it counts among tcpPollers; contended, a yield
	// found the CPU wanted; stopping, one that the spin limit ends the
	// polling.
	spinning  bool
	contended bool
	stopping  bool
	rgate     gateRef // the fence of the region a payload read fills (fence.go)

	// Polling before a park (setSpin): spin is the budget; spinEnd the
	// current wait's end of polling (spinGate.Now; 0: not polling yet, -1:
	// parked); parkedAt when the reader last parked (monotime), or once it
	// woke, minus when it woke (wokeAt); and since
	// setSpin, polled is the longest polling that input ended, parked the
	// time parked.
	spin     time.Duration
	spinEnd  int64
	parkedAt int64
	polled   time.Duration
	parked   time.Duration

	// The socket's read deadline is both the engine's deadline and, set
	// in the past, interrupt's way to wake a parked read. dlMu orders the
	// two: while an interrupt is pending (intr), the deadline stays in the
	// past, so that a concurrent setReadDeadline (rdma_disconnect's, say)
	// cannot re-park a read the interrupt has just woken, which would lose
	// the interrupt.
	dlMu     sync.Mutex
	intr     bool  // interrupt requested, not yet seen by the reader
	wwait    bool  // the write side's (packed here beside intr)
	deadline int64 // the read deadline the engine set (unix ns, 0 none)

	// Write side, used by one goroutine at a time.
	wiov    []unix.Iovec
	wbufs   [][]byte
	widx    int
	woff    int
	wn      int
	werr    error
	wgates  []gateRef // beside wbufs: their regions' fences, or nil
	writeFn func(fd uintptr) bool
	wsmall  [512]byte
	wone    [1][]byte
}

const (
	tcpBufSize = 128 << 10
	// tcpSmallBuf is the read buffer of a sleeping reader, which every
	// connection carries: room for a header and a small payload, what
	// usually arrives first after a sleep; more goes to a borrowed big one.
	tcpSmallBuf = 512
	iovMax      = 1024 // IOV_MAX on Linux
	iovStart    = 8    // wiov's first size; it grows to what writev is given, up to iovMax
)

// tcpBufs lends read buffers to TCP transports whose readers are busy. A
// free list of its own, not a sync.Pool: a pool empties at garbage
// collections (and drops puts at random under the race detector), and a
// read that then allocates 128 KiB is what the lending is there to avoid.
var tcpBufs = struct {
	mu   sync.Mutex
	free []*[tcpBufSize]byte
}{free: make([]*[tcpBufSize]byte, 0, tcpBufsKept)}

// tcpBufsKept bounds the free list (8 MiB); more go to the collector.
const tcpBufsKept = 64

// borrow moves the buffered bytes into a big buffer.
func (t *tcpTransport) borrow() {
	var b *[tcpBufSize]byte
	tcpBufs.mu.Lock()
	if n := len(tcpBufs.free); n > 0 {
		b = tcpBufs.free[n-1]
		tcpBufs.free[n-1] = nil
		tcpBufs.free = tcpBufs.free[:n-1]
	}
	tcpBufs.mu.Unlock()
	if b == nil {
		b = new([tcpBufSize]byte)
	}
	t.w = copy(b[:], t.buf[t.r:t.w])
	t.r = 0
	t.big, t.buf = b, b[:]
}

// lend gives the big buffer back when the reader is about to sleep between
// frames with nothing buffered, and points the pending read at the small
// one (what arrives first after a sleep is usually small).
func (t *tcpTransport) lend() {
	if t.big == nil || !t.boundary || t.buffered() || t.rcnt != 1 {
		return
	}
	t.giveBack()
	t.riov[0].Base = &t.small[0]
	t.riov[0].SetLen(len(t.small))
}

// buffered reports whether bytes read from the socket wait in the buffer.
func (t *tcpTransport) buffered() bool { return t.r != t.w }

// holds: the next n bytes were read from the socket with what came before
// (a header and a small payload arrive in one read).
func (t *tcpTransport) holds(n int) bool { return t.w-t.r >= n }

// dropBuffer gives the big buffer back for good, when the reader leaves
// this transport (a switch to shared memory) with nothing buffered.
func (t *tcpTransport) dropBuffer() {
	if t.big == nil || t.buffered() {
		return
	}
	t.giveBack()
}

// giveBack puts the big buffer, with nothing buffered in it, on the free
// list, and reads into the small one again.
func (t *tcpTransport) giveBack() {
	tcpBufs.mu.Lock()
	if len(tcpBufs.free) < tcpBufsKept {
		tcpBufs.free = append(tcpBufs.free, t.big)
	}
	tcpBufs.mu.Unlock()
	t.big, t.buf, t.r, t.w = nil, t.small[:], 0, 0
}

func newTCPTransport(c *net.TCPConn) (*tcpTransport, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	// Nagle is off already: net.Dial and Accept turn it off.
	tuneSameHost(c, rc) // tcpcc.go
	t := &tcpTransport{c: c, rc: rc, wiov: make([]unix.Iovec, iovStart)}
	t.buf = t.small[:]
	t.readFn = t.doRead
	t.writeFn = t.doWrite
	return t, nil
}

func (t *tcpTransport) doRead(fd uintptr) bool {
	t.unparked()
	for {
		// The system call copies into the region only while it runs, and
		// it never waits: the fence is held for that long only.
		if !t.rgate.enter() {
			t.rerr = errFenced
			return true
		}
		var n uintptr
		var e unix.Errno
		if t.rcnt == 1 {
			// Plain read(2) is cheaper than a one-element readv(2).
			n, _, e = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(t.riov[0].Base)), uintptr(t.riov[0].Len))
		} else {
			n, _, e = unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&t.riov[0])), uintptr(t.rcnt))
		}
		t.rgate.exit()
		switch e {
		case 0:
			if t.spinEnd != 0 {
				t.caught()
			}
			t.rn = int(n)
			if n == 0 {
				t.rerr = io.EOF
			}
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if t.rwait {
				if t.onIdle != nil && !t.idled {
					// Input that arrives meanwhile marks the fd ready, so
					// the poller does not park us past it.
					t.idled = true
					if t.onIdle(t.boundary) && t.boundary {
						t.rerr = errInterrupted
						return true
					}
				}
				if t.spin > 0 {
					if t.polling() {
						continue
					}
					t.parkedAt, t.spinEnd = monotime(), -1
				}
				t.lend()
				return false
			}
			t.rn = 0
			return true
		default:
			t.rerr = e
			return true
		}
	}
}

// polling reports whether a read that found no input polls again rather
// than parks: within the wait's budget, with a place among the process's
// TCP pollers (tcpPollers), unless the spin limit (spinGate) found the
// CPUs wanted lately (BusyAt), the process's waits outnumber its Ps
// (ManyWaits) or a yield's timing says to stop (Yielded),
// and with no interrupt pending (the park then returns at once). Between
// polls it yields the thread's CPU (sched_yield), not only the
// goroutine's P: a yield of the P (runtime.Gosched) keeps the CPU when no
// other goroutine is runnable, and on a host whose CPUs are taken the
// peer that is to answer, in another process or on another thread, then
// waits for the kernel to preempt the poller. Both ends of a loopback
// connection polled that way, each wait ran to its budget (which the poll
// role stretches to 8x PollTime after waits that long), and a single
// connection's 64 B round trips sat at 430-850 us p50 in some runs.
// While goroutines wait for a P (Crowded) it yields the P instead, so
// that they run, and polls on.
func (t *tcpTransport) polling() bool {
	if t.spinEnd == 0 && spinGate.ManyWaits() {
		return false // before the clock read, spent for nothing here
	}
	now := spinGate.Now()
	if t.spinEnd == 0 {
		if spinGate.BusyAt(now) || !enterTCPPoll() {
			return false
		}
		t.spinning, t.contended, t.stopping = true, false, false
		t.spinEnd = now + int64(t.spin)
	}
	if t.stopping || now >= t.spinEnd || spinGate.ManyWaits() || t.interruptPending() {
		if t.contended && now >= t.spinEnd {
			spinGate.Contended()
		}
		t.endSpin()
		return false
	}
	if spinGate.CrowdedAt(now) {
		// Goroutines wait for a P: ours goes to them, and the polling
		// carries on once they have run.
		runtime.Gosched()
		return true
	}
	if now-(t.spinEnd-int64(t.spin)) < int64(tcpPollGoschedFor) {
		// The first moments of a wait, where a quiet host's answers
		// come, give up only the P: a sched_yield per poll there
		// halved one connection's round trips on an idle 2-CPU host.
		runtime.Gosched()
		return true
	}
	schedYield()
	// The yield is timed here, with a second reading of the clock, which
	// costs little beside the system calls: a field to time it from at
	// the next poll would take the struct past its size class.
	slow, stop := spinGate.Yielded(time.Duration(spinGate.Now() - now))
	t.contended = t.contended || slow
	t.stopping = stop // one more look, then park
	return true
}

// tcpPollGoschedFor is how long a wait's polling yields only its P
// (runtime.Gosched) before it yields the thread's CPU between polls
// (sched_yield): long enough for an answer on a host with CPUs to spare,
// short enough that where the peer waits for this thread's CPU it gets it
// after a few polls rather than at the kernel's next preemption.
const tcpPollGoschedFor = 50 * time.Microsecond

// tcpPollers counts the reads of the process that poll their sockets, at
// most GOMAXPROCS at once; the others park at once. With a poller per
// connection (8 connections on 2 CPUs) the reading side made 26-62
// read(2) calls a round trip, with this bound 4-5. They take no place
// among the spin limit's spinners (GOMAXPROCS-1 of them): two ends of a
// conversation in one process poll in turn, each for the other's answer,
// and with one place the end that waited for an answer found it taken by
// the other, waiting for the next question, and parked every time.
var tcpPollers atomic.Int32

// enterTCPPoll takes a place among tcpPollers, if there is one.
func enterTCPPoll() bool {
	limit := int32(runtime.GOMAXPROCS(0))
	for {
		n := tcpPollers.Load()
		if n >= limit {
			return false
		}
		if tcpPollers.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// endSpin gives back the polling's place among the process's spinners.
func (t *tcpTransport) endSpin() {
	if t.spinning {
		t.spinning = false
		tcpPollers.Add(-1)
	}
}

// interruptPending reports whether an interrupt waits for the reader.
func (t *tcpTransport) interruptPending() bool {
	t.dlMu.Lock()
	defer t.dlMu.Unlock()
	return t.intr
}

// unparked counts the time parked since a polling read parked, if it did,
// and keeps the clock reading it took for wokeAt.
func (t *tcpTransport) unparked() {
	if t.parkedAt > 0 {
		now := monotime()
		t.parked += time.Duration(now - t.parkedAt)
		t.parkedAt = -now
	}
}

// wokeAt is the monotime at which the reader last woke from a park since
// setSpin, or 0. The receive role's holder lets go of the role a few
// microseconds after the wake-up that brought its event, and takes this
// reading for the moment (rxRole.freeAt) instead of a clock read of its
// own: the background compares it with a millisecond at the least.
func (t *tcpTransport) wokeAt() int64 { return max(-t.parkedAt, 0) }

// caught notes input that came while the wait polled (spinEnd > 0), or
// after it parked (-1).
func (t *tcpTransport) caught() {
	if t.spinEnd > 0 {
		t.polled = max(t.polled, time.Duration(spinGate.Now()-(t.spinEnd-int64(t.spin))))
		if t.parkedAt < 0 {
			t.parkedAt = 0 // the last wake-up's reading is a polling old
		}
	}
	t.spinEnd = 0
}

func (t *tcpTransport) setSpin(d time.Duration) (polled, parked time.Duration) {
	polled, parked = t.polled, t.parked
	t.spin, t.polled, t.parked = d, 0, 0
	if t.parkedAt < 0 {
		t.parkedAt = 0 // a wake-up's reading, which the next drive does not use
	}
	return polled, parked
}

// readv reads into a, then b, at least one byte unless wait is false.
func (t *tcpTransport) readv(a, b []byte, wait bool) (int, error) {
	t.rcnt = 0
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			t.riov[t.rcnt].Base = &p[0]
			t.riov[t.rcnt].SetLen(len(p))
			t.rcnt++
		}
	}
	for {
		t.rwait, t.rn, t.rerr, t.idled, t.spinEnd = wait, 0, nil, false, 0
		err := t.rc.Read(t.readFn)
		t.unparked()
		t.endSpin()
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			// Either the engine's deadline passed, or interrupt moved it.
			if !t.deadlinePassed() {
				if t.takeInterrupt() && t.boundary {
					err = errInterrupted
				} else {
					// Inside a frame the read carries on: the engine
					// looks for what the interrupt was about before the
					// next frame.
					continue
				}
			}
		}
		t.riov[0].Base, t.riov[1].Base = nil, nil
		if err != nil {
			return 0, err
		}
		return t.rn, t.rerr
	}
}

// deadlinePassed reports whether the engine's read deadline has passed.
func (t *tcpTransport) deadlinePassed() bool {
	t.dlMu.Lock()
	d := t.deadline
	t.dlMu.Unlock()
	return d != 0 && time.Now().UnixNano() >= d
}

// takeInterrupt consumes a pending interrupt, reporting whether there was
// one, and puts the engine's deadline back on the socket.
func (t *tcpTransport) takeInterrupt() bool {
	t.dlMu.Lock()
	defer t.dlMu.Unlock()
	was := t.intr
	t.intr = false
	var d time.Time
	if t.deadline != 0 {
		d = time.Unix(0, t.deadline)
	}
	_ = t.c.SetReadDeadline(d)
	return was
}

func (t *tcpTransport) interrupt() {
	t.dlMu.Lock()
	t.intr = true
	_ = t.c.SetReadDeadline(time.Unix(1, 0))
	t.dlMu.Unlock()
}

func (t *tcpTransport) readHeader(h *[hdrLen]byte) error {
	t.boundary = true
	defer func() { t.boundary = false }()
	for t.w-t.r < hdrLen {
		if t.big == nil {
			t.borrow()
		}
		if t.r > 0 && len(t.buf)-t.r < hdrLen {
			t.w = copy(t.buf, t.buf[t.r:t.w])
			t.r = 0
		}
		n, err := t.readv(nil, t.buf[t.w:], true)
		t.w += n
		if err != nil {
			if err == io.EOF && t.w > t.r {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	copy(h[:], t.buf[t.r:])
	t.r += hdrLen
	return nil
}

// readPayload fills dst, in the region fenced by g (zero: none). Once g is
// closed nothing more lands in dst: the rest of it is skipped on the
// stream and the read returns errFenced.
func (t *tcpTransport) readPayload(dst []byte, g gateRef) error {
	if len(dst) == 0 {
		return nil
	}
	if t.r < t.w {
		if !g.enter() {
			return t.skipFenced(len(dst))
		}
		n := copy(dst, t.buf[t.r:t.w])
		g.exit()
		t.r += n
		dst = dst[n:]
	}
	t.rgate = g
	defer func() { t.rgate = gateRef{} }()
	for len(dst) > 0 {
		t.r, t.w = 0, 0
		// Read ahead into the buffer for the next header, but for large
		// payloads only a little, so that the next payload also lands in
		// place instead of being copied out of the buffer.
		over := t.buf
		if len(dst) >= 16<<10 {
			over = t.buf[:min(4096, len(t.buf))]
		}
		n, err := t.readv(dst, over, true)
		if n <= len(dst) {
			dst = dst[n:]
		} else {
			t.w = n - len(dst)
			dst = nil
		}
		if err == errFenced {
			t.rgate = gateRef{}
			return t.skipFenced(len(dst))
		}
		if err != nil && len(dst) > 0 {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// skipFenced skips the n payload bytes a closed fence kept out of their
// region, so that the stream stays at a frame boundary.
func (t *tcpTransport) skipFenced(n int) error {
	if err := t.discard(n); err != nil {
		return err
	}
	return errFenced
}

func (t *tcpTransport) discard(n int) error {
	k := min(n, t.w-t.r)
	t.r += k
	n -= k
	for n > 0 {
		t.r, t.w = 0, 0
		got, err := t.readv(nil, t.buf, true)
		k := min(n, got)
		t.r, t.w = k, got
		n -= k
		if err != nil && n > 0 {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

func (t *tcpTransport) setIdle(f func(bool) bool) { t.onIdle = f }

func (t *tcpTransport) doWrite(fd uintptr) bool {
	for t.widx < len(t.wbufs) {
		k, end := 0, t.widx
		for ; end < len(t.wbufs) && k < len(t.wiov); end++ {
			b := t.wbufs[end]
			if end == t.widx {
				b = b[t.woff:]
			}
			if len(b) == 0 {
				continue
			}
			t.wiov[k].Base = &b[0]
			t.wiov[k].SetLen(len(b))
			k++
		}
		if k == 0 {
			t.widx = len(t.wbufs)
			break
		}
		// The kernel copies out of the regions only during the call,
		// which never waits: their fences are held for that long only.
		if t.wgates != nil && !enterAll(t.wgates[t.widx:end]) {
			t.werr = errFenced
			return true
		}
		var n uintptr
		var e unix.Errno
		if k == 1 {
			n, _, e = unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(t.wiov[0].Base)), uintptr(t.wiov[0].Len))
		} else {
			n, _, e = unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&t.wiov[0])), uintptr(k))
		}
		if t.wgates != nil {
			exitAll(t.wgates[t.widx:end])
		}
		switch e {
		case 0:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return !t.wwait
		default:
			t.werr = e
			return true
		}
		t.wn += int(n)
		for n > 0 {
			rem := uintptr(len(t.wbufs[t.widx]) - t.woff)
			if n >= rem {
				n -= rem
				t.widx++
				t.woff = 0
			} else {
				t.woff += int(n)
				n = 0
			}
		}
		for t.widx < len(t.wbufs) && len(t.wbufs[t.widx]) == t.woff {
			t.widx++
			t.woff = 0
		}
	}
	return true
}

// writev writes bufs; gates, if not nil, holds beside each buffer the
// fence of the region it lies in. Once one of those is closed nothing more
// is read from its buffer, and writev returns errFenced.
func (t *tcpTransport) writev(bufs [][]byte, gates []gateRef, wait bool) (int, error) {
	// Small frames go out as one contiguous write: the kernel's per-iovec
	// cost outweighs a copy of a few hundred bytes.
	if len(bufs) > 1 {
		n := 0
		for _, b := range bufs {
			n += len(b)
		}
		if n <= len(t.wsmall) {
			if gates != nil && !enterAll(gates) {
				return 0, errFenced
			}
			k := 0
			for _, b := range bufs {
				k += copy(t.wsmall[k:], b)
			}
			if gates != nil {
				exitAll(gates)
			}
			t.wone[0] = t.wsmall[:k]
			bufs, gates = t.wone[:], nil
		}
	}
	if len(bufs) > len(t.wiov) && len(t.wiov) < iovMax {
		t.wiov = make([]unix.Iovec, min(len(bufs), iovMax))
	}
	t.wbufs, t.wgates, t.widx, t.woff, t.wn, t.wwait, t.werr = bufs, gates, 0, 0, 0, wait, nil
	err := t.rc.Write(t.writeFn)
	n, werr := t.wn, t.werr
	t.wbufs, t.wgates = nil, nil
	clear(t.wiov[:min(len(t.wiov), len(bufs))])
	if err != nil {
		return n, err
	}
	return n, werr
}

func (t *tcpTransport) closeWrite() error { return t.c.CloseWrite() }

func (t *tcpTransport) setReadDeadline(d time.Time) error {
	var ns int64
	if !d.IsZero() {
		ns = d.UnixNano()
	}
	t.dlMu.Lock()
	defer t.dlMu.Unlock()
	t.deadline = ns
	if t.intr {
		return nil // the reader puts it on the socket once it has woken
	}
	return t.c.SetReadDeadline(d)
}

func (t *tcpTransport) close() error {
	err := t.c.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// trimVec drops the first n bytes of v, returning what is left; it rewrites
// v's first remaining element in place.
func trimVec(v [][]byte, n int) [][]byte {
	for len(v) > 0 && n >= len(v[0]) {
		n -= len(v[0])
		v = v[1:]
	}
	if len(v) > 0 && n > 0 {
		v[0] = v[0][n:]
	}
	return v
}
