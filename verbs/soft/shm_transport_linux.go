//go:build linux

package soft

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shmTransport carries frames through two shared rings (transport.go).
//
// Both of its waits, the reader's for data and the writer's for space,
// sleep on the one eventfd of ours, which the peer signals for either (see
// sleep). Read deadlines are the transport's own (a timer that signals the
// eventfd), so that one set for the reader never cuts a writer's wait
// short.
type shmTransport struct {
	tcp  *net.TCPConn // liveness: the peer's death closes it
	rx   shmRing      // we consume
	tx   shmRing      // we produce
	size uint64

	ev     *os.File // ours: we sleep on it (nil when gathered)
	evRC   syscall.RawConn
	myEv   int // its descriptor (or the doorbell's), valid until free
	peerEv int // the peer's: we signal it

	// The doorbell: bell counts us as a connection to the peer process;
	// when gathered, both waits sleep through it (shm_doorbell_linux.go).
	bell     *shmDoorbell
	gathered bool
	waits    [2]shmWait

	rdl shmReadDeadline

	// Read side (one goroutine at a time).
	rhead   uint64
	recKind uint32
	recSrc  []byte
	recEnd  uint64
	hpart   [hdrLen]byte
	hn      int
	onIdle  func(boundary bool) bool
	rBusy   busySpin
	rSpin   failing       // the whole spin (busyspin.go)
	rIdle   bool          // the last wait slept longer than shmIdleGap
	rQuiet  shmQuiet      // what the last wait's end saw
	rSlept  time.Duration // slept since the last setSpin
	intr    atomic.Bool
	rArm    bool

	// Write side (one goroutine at a time).
	wpos     uint64 // our tail, including records not yet published
	whead    uint64 // the consumer's head as last seen
	open     bool   // a recData record is open at recAt
	recAt    uint64
	recN     uint64
	piped    bool // the batch carries a READ response: small records (pipeline)
	wArm     bool
	wSeen    atomic.Uint64 // whead when the writer went to sleep, for the reader's look
	rewindAt uint64        // wpos from which rewind looks at the consumer's head again
	txCopy   ringCopier

	// Who sleeps on the eventfd (sleep).
	sleepMu  sync.Mutex
	parked   bool
	want     [2]atomic.Bool
	poke     [2]chan struct{}
	sleepFns [2]func(fd uintptr) bool

	// Lifecycle.
	users     atomic.Int64
	closed    atomic.Bool
	gone      atomic.Bool
	release   sync.Once
	watchOnce sync.Once
	watchFn   func()
	watchDone chan struct{}
}

const shmClosing = 1 << 40

var one = [8]byte{1}

// schedYield gives up the CPU. A raw system call: through unix.Syscall the
// runtime marks the P as in a system call, and a yield that lets the peer
// (or anything else) run for more than 20 us then has sysmon retake the P,
// hand it to another thread and keep waking every 20 us itself. Measured in
// a 64 KiB rdmaperf stream on a loaded 2-CPU host: nanosleep calls 5,000 ->
// 750 and context switches 29,000 -> 21,000 per 100,000 messages.
func schedYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

func signalFD(fd int) { _, _ = unix.Write(fd, one[:]) }

func newShmTransport(c *net.TCPConn, l *shmLocal, p *shmPeer) (*shmTransport, error) {
	t := &shmTransport{tcp: c, rx: viewRing(l.ring), tx: viewRing(p.ring),
		peerEv: p.ev, watchDone: make(chan struct{})}
	t.size = uint64(len(t.tx.data))
	t.myEv = l.eventFD()
	t.rdl.wake = func() {
		if t.enter() {
			signalFD(t.myEv)
			t.exit()
		}
	}
	t.bell, t.gathered = l.bell, l.gathered
	t.waits[sleepReader] = shmWait{t: t, who: sleepReader, flag: t.rx.rwait, idx: -1, poke: make(chan struct{}, 1)}
	t.waits[sleepWriter] = shmWait{t: t, who: sleepWriter, flag: t.tx.wwait, idx: -1, poke: make(chan struct{}, 1)}
	var err error
	if !t.gathered {
		t.ev = os.NewFile(uintptr(l.ev), "eventfd")
		t.evRC, err = t.ev.SyscallConn()
	}
	unix.Close(l.ringFD)
	l.ring, l.ringFD, l.ev, l.bell, l.gathered = nil, -1, -1, nil, false
	p.ring, p.ev = nil, -1
	t.sleepFns = [2]func(uintptr) bool{t.doWait, t.doWaitSpace}
	t.poke = [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	t.watchFn = t.startWatch
	t.rQuiet.txTail = ^uint64(0) // no wait yet: the first may spin
	if err != nil {
		t.close()
		return nil, errShmSetup
	}
	shmUsed.Add(1)
	return t, nil
}

func (t *shmTransport) enter() bool {
	if t.users.Add(1) >= shmClosing {
		t.exit()
		return false
	}
	return true
}

func (t *shmTransport) exit() {
	if t.users.Add(-1) == shmClosing {
		t.release.Do(t.free)
	}
}

func (t *shmTransport) free() {
	_ = unix.Munmap(t.rx.mem)
	_ = unix.Munmap(t.tx.mem)
	if t.ev != nil {
		t.ev.Close()
	}
	unix.Close(t.peerEv)
	if t.bell != nil {
		t.bell.release(t.gathered)
	}
}

func (t *shmTransport) startWatch() { go t.watch() }

// watch reads the handshake's TCP connection, on which nothing more comes:
// its end means the peer is gone (or we closed).
func (t *shmTransport) watch() {
	defer close(t.watchDone)
	var b [1]byte
	_, _ = t.tcp.Read(b[:])
	t.gone.Store(true)
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
}

func (t *shmTransport) close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.tcp.Close()
	t.rdl.stop()
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
	t.watchOnce.Do(func() { close(t.watchDone) })
	<-t.watchDone
	if t.users.Add(shmClosing) == shmClosing {
		t.release.Do(t.free)
	}
	return nil
}

func (t *shmTransport) setIdle(f func(bool) bool) { t.onIdle = f }

// setSpin reports the reader's sleeps; its spin is its own (wait).
func (t *shmTransport) setSpin(time.Duration) (polled, parked time.Duration) {
	d := t.rSlept
	t.rSlept = 0
	return 0, d
}

func (t *shmTransport) interrupt() {
	t.intr.Store(true)
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
}

// setReadDeadline bounds the reader's waits from now on and wakes a
// reader asleep when it passes.
func (t *shmTransport) setReadDeadline(d time.Time) error {
	t.rdl.set(d)
	return nil
}

// shmReadDeadline is the shared-memory reader's deadline: when it passes
// (UnixNano, 0: none), which every wait of the reader checks (passed),
// and the timer that wakes a reader asleep then (made on first use).
// After stop no timer fires again.
type shmReadDeadline struct {
	at      atomic.Int64
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	wake    func() // wakes the reader (set once, before use)
}

func (d *shmReadDeadline) set(at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.IsZero() {
		d.at.Store(0)
		if d.timer != nil {
			d.timer.Stop()
		}
		return
	}
	d.at.Store(max(at.UnixNano(), 1))
	if d.stopped {
		return
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(time.Until(at), d.wake)
	} else {
		d.timer.Reset(time.Until(at))
	}
}

// passed reports whether the deadline has passed.
func (d *shmReadDeadline) passed() bool {
	at := d.at.Load()
	return at != 0 && time.Now().UnixNano() >= at
}

// stop stops the timer for good (the transport closes).
func (d *shmReadDeadline) stop() {
	d.mu.Lock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
}

// The two waiters on our eventfd.
const (
	sleepReader = 0
	sleepWriter = 1
)

// readable and writable are what wakes the reader and the writer, read
// from atomics only, so that either waiter can look on the other's behalf.
func (t *shmTransport) readable() bool {
	return t.rx.tail.Load() != t.rx.head.Load() || t.rx.wclosed.Load() != 0 || t.gone.Load() ||
		t.closed.Load() || t.intr.Load() || t.rdl.passed()
}

func (t *shmTransport) writable() bool {
	return t.tx.head.Load() != t.wSeen.Load() || t.gone.Load() || t.closed.Load()
}

func (t *shmTransport) ready(who int) bool {
	if who == sleepReader {
		return t.readable()
	}
	return t.writable()
}

// sleep waits for a signal on our eventfd on behalf of who (sleepReader or
// sleepWriter), whose condition was just found false; the caller looks at
// it again afterwards. One waiter at a time parks on the poller; the other,
// if it comes meanwhile, registers in want and waits on its poke channel,
// and the parked one hands every wake-up on to it. Nothing is missed: the
// parked one, before it parks, looks at a registered waiter's condition as
// well as its own, and a waiter that registers later looks at its own
// after registering (a signal always follows what it announces).
func (t *shmTransport) sleep(who int) error {
	if t.gathered {
		t.bell.sleep(&t.waits[who])
		return nil
	}
	other := 1 - who
	t.sleepMu.Lock()
	if t.parked {
		t.want[who].Store(true)
		t.sleepMu.Unlock()
		if t.ready(who) {
			t.sleepMu.Lock()
			if t.want[who].Load() {
				t.want[who].Store(false)
				t.sleepMu.Unlock()
				return nil
			}
			t.sleepMu.Unlock() // poked meanwhile: take the token below
		}
		<-t.poke[who]
		return nil
	}
	t.parked = true
	t.sleepMu.Unlock()
	if who == sleepReader {
		t.rArm = true
	} else {
		t.wArm = true
	}
	err := t.evRC.Read(t.sleepFns[who])
	t.sleepMu.Lock()
	t.parked = false
	if t.want[other].Load() {
		t.want[other].Store(false)
		t.poke[other] <- struct{}{}
	}
	t.sleepMu.Unlock()
	return err
}

// doWait and doWaitSpace are RawConn.Read callbacks that park once on the
// poller. The eventfd's counter is never read: every write to an eventfd is
// a new edge for the (edge-triggered) poller, so reading it back would only
// cost a system call per wake-up. RawConn.Read forgets a readiness that
// came before it started, so the first call looks again at what a signal
// would announce (published before signalling), for the caller and for a
// waiter registered behind it, and a signal sent after that look wakes the
// wait.
func (t *shmTransport) doWait(uintptr) bool {
	if t.rArm {
		t.rArm = false
		return t.rx.tail.Load() != t.rhead || t.readable() ||
			(t.want[sleepWriter].Load() && t.writable())
	}
	return true
}

func (t *shmTransport) doWaitSpace(uintptr) bool {
	if t.wArm {
		t.wArm = false
		return t.tx.head.Load() != t.whead || t.writable() ||
			(t.want[sleepReader].Load() && t.readable())
	}
	return true
}

// ---- read side ----

func (t *shmTransport) readHeader(h *[hdrLen]byte) error {
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	t.watchOnce.Do(t.watchFn)
	for t.hn < hdrLen {
		if err := t.next(t.hn == 0); err != nil {
			if err == io.EOF && t.hn > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		t.hn += t.take(t.hpart[t.hn:])
	}
	*h = t.hpart
	t.hn = 0
	return nil
}

// readPayload fills dst, in the region fenced by g (zero: none). The fence
// is held only while a record's bytes, already in the ring, are copied;
// once it is closed the rest of dst is skipped and the read returns
// errFenced.
func (t *shmTransport) readPayload(dst []byte, g gateRef) error {
	if len(dst) == 0 {
		return nil
	}
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	for len(dst) > 0 {
		if err := t.next(false); err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if !g.enter() {
			if err := t.discard(len(dst)); err != nil {
				return err
			}
			return errFenced
		}
		n := t.take(dst)
		g.exit()
		dst = dst[n:]
	}
	return nil
}

func (t *shmTransport) discard(n int) error {
	if n == 0 {
		return nil
	}
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	for n > 0 {
		if err := t.next(false); err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		k := min(n, len(t.recSrc))
		t.recSrc = t.recSrc[k:]
		n -= k
		t.done()
	}
	return nil
}

// holds: the next n bytes lie in the current record (a frame's header and
// payload are written as one record, so the payload is there once its
// header was read); a payload that goes on in the next record says false.
func (t *shmTransport) holds(n int) bool { return len(t.recSrc) >= n }

// take copies from the current record into dst.
func (t *shmTransport) take(dst []byte) int {
	n := copy(dst, t.recSrc)
	t.recSrc = t.recSrc[n:]
	t.done()
	return n
}

// done releases a fully read recData record's ring space.
func (t *shmTransport) done() {
	if len(t.recSrc) == 0 && t.recKind == recData {
		t.recKind = 0
		t.consume(t.recEnd)
	}
}

// consume moves the ring's head to h and wakes a producer waiting for space.
func (t *shmTransport) consume(h uint64) {
	t.rhead = h
	t.rx.head.Store(h)
	if t.rx.wwait.Load() != 0 && t.rx.wwait.CompareAndSwap(1, 0) {
		signalFD(t.peerEv)
	}
}

// next makes a record with unread stream bytes current, waiting for one.
// boundary: the read is between frames (interruptible).
func (t *shmTransport) next(boundary bool) error {
	stage := 0
	for len(t.recSrc) == 0 {
		t.recKind = 0
		avail := t.rx.tail.Load() - t.rhead
		if avail == 0 {
			if err := t.wait(boundary, &stage); err != nil {
				return err
			}
			continue
		}
		if avail > t.size || avail%8 != 0 {
			return errProtocol
		}
		pos := t.rhead & t.rx.mask
		room := t.size - pos
		w := binary.LittleEndian.Uint64(t.rx.data[pos:])
		kind, n := uint32(w), w>>32
		switch kind {
		case recData:
			tot := recHdr + (n+7)&^7
			if n == 0 || tot > avail || tot > room {
				return errProtocol
			}
			t.recKind = recData
			t.recSrc = t.rx.data[pos+recHdr : pos+recHdr+n : pos+recHdr+n]
			t.recEnd = t.rhead + tot
		case recPad:
			if n != room-recHdr || room > avail {
				return errProtocol
			}
			t.consume(t.rhead + room)
		default:
			return errProtocol
		}
	}
	return nil
}

// wait waits for the ring to become non-empty: first the idle hook, then a
// bounded spin, then sleep on the eventfd.
func (t *shmTransport) wait(boundary bool, stage *int) error {
	if t.closed.Load() {
		return net.ErrClosed
	}
	if t.rx.wclosed.Load() != 0 && t.rx.tail.Load() == t.rhead {
		return io.EOF
	}
	if t.gone.Load() && t.rx.tail.Load() == t.rhead {
		return io.ErrUnexpectedEOF
	}
	if boundary && t.intr.Swap(false) {
		return errInterrupted
	}
	if t.rdl.passed() {
		return os.ErrDeadlineExceeded
	}
	switch *stage {
	case 0:
		*stage = 1
		if t.onIdle != nil && t.onIdle(boundary) && boundary {
			return errInterrupted
		}
		return nil
	case 1:
		*stage = 2
		// ManyWaits first: with many connections no spin begins, and
		// the clock read that EnterAt wants would be spent for nothing.
		if spin := shmSpin.Load(); spin > 0 && !t.rIdle && !spinGate.ManyWaits() && t.rSpin.try() {
			if start := spinGate.Now(); !t.rQuiet.since(start, t.rhead, t.tx.tail.Load()) && spinGate.EnterAt(start) {
				t.rQuiet.ended(t.spinRead(start, spin), t.rx.tail.Load(), t.tx.tail.Load())
				spinGate.Leave()
				return nil
			}
		}
		fallthrough
	case 2:
		// Before it sleeps, a reader of a busy connection lets the
		// goroutines that wait for a P run, once, and looks again: with
		// many connections (whose readers mostly may not spin) the answer
		// often comes meanwhile, and neither end then pays the eventfd's
		// signal and wake-up. Only while goroutines wait for a P: a yield
		// (runtime.Gosched) wakes an idle P's thread to look for work,
		// a system call and a context switch that, with nothing to run,
		// cost a single connection's round trips a third of their rate
		// (rdmaperf -P 1, 64 B, 7 rounds interleaved). At -P 64 the rounds
		// on the shared 2-CPU host did not tell it from sleeping at once
		// beyond their noise (1.4-1.9x TCP's msg/s, p99 0.5-1.0x TCP's).
		*stage = 3
		if !t.rIdle && spinGate.Crowded() {
			runtime.Gosched()
			return nil
		}
	}
	t.rx.rwait.Store(1)
	if t.rx.tail.Load() != t.rhead || t.rx.wclosed.Load() != 0 || t.gone.Load() || t.closed.Load() || (boundary && t.intr.Load()) {
		t.rx.rwait.Store(0)
		return nil
	}
	// A reader asleep counts for the spin limit: its wake-up will want a
	// CPU (spinGate.Yielded).
	spinGate.Sleeping(1)
	slept := monotime()
	err := t.sleep(sleepReader)
	d := monotime() - slept
	spinGate.Sleeping(-1)
	t.rIdle = d > int64(shmIdleGap)
	t.rSlept += time.Duration(d)
	t.rx.rwait.Store(0)
	t.rQuiet.ended(spinGate.Now(), t.rx.tail.Load(), t.tx.tail.Load())
	return err
}

// shmQuiet is what the reader saw as its last wait ended: when (a reading
// of spinGate.Now), and the tails of both rings then.
type shmQuiet struct {
	at     int64
	rxTail uint64
	txTail uint64
}

// ended records the end of a wait (its spin's or its sleep's) at now,
// with the tails of the ring we read (rx) and the one we write (tx).
func (q *shmQuiet) ended(now int64, rx, tx uint64) {
	*q = shmQuiet{at: now, rxTail: rx, txTail: tx}
}

// since reports whether, at now, the connection has been quiet since the
// reader's last wait ended at least shmIdleGap ago: nothing came in after
// what that wait found (the reader's head is still there) and nothing went
// out (our tail is). Such a wait does not spin, for nothing says data is
// near: no answer is due to something sent, and no stream is flowing.
// Above all it is the wait of soft's background receiver, which takes the
// receive role back once a connection's waiters have let it go for a while
// (a quiet go-redis client between its paced requests): its spin found
// nothing, and its misses turned the spin off for the waits of the
// program's own reads too (rSpin). A reader that sent since (a request
// whose answer it waits for) or that waits again soon (a stream) spins as
// before; so does a reader's first wait.
func (q *shmQuiet) since(now int64, rhead, tx uint64) bool {
	return now-q.at >= int64(shmIdleGap) && rhead == q.rxTail && tx == q.txTail
}

// spinRead is the reader's spin on an empty ring, for up to spin ns from
// start (a reading of spinGate.Now), which the process's spin limit
// allowed (spinGate.EnterAt). It returns when data came, or to sleep:
// the spin ran out, the transport closed or was interrupted, goroutines
// wait for a P (spinGate.CrowdedAt), whom the sleep gives it, more waits
// run than Ps (spinGate.ManyWaits), or a slow
// yield among many sleeping readers (spinGate.Yielded). A spin that ran
// out after a slow yield tells spinGate.Contended. It returns its last
// reading of the clock (start if it took none).
func (t *shmTransport) spinRead(start, spin int64) (now int64) {
	end := start + spin
	now = start
	busy := t.rBusy.budget(spin)
	// contended: a yield found the CPU wanted. yielded: when the last
	// yield began; the next look at the clock, 64 polls (well under a
	// microsecond) after it returned, times it.
	contended, yielded := false, int64(0)
	for i := 1; ; i++ {
		if t.rx.tail.Load() != t.rhead {
			if busy > 0 {
				t.rBusy.caught(spinGate.Now()-start < busy)
			}
			t.rSpin.result(true)
			return
		}
		if i%64 == 0 {
			now = spinGate.Now()
			if yielded != 0 {
				slow, stop := spinGate.Yielded(time.Duration(now - yielded))
				if stop {
					return // the sleep gives the CPU to the connections that wake
				}
				contended = contended || slow
			}
			if t.intr.Load() || t.closed.Load() || now > end {
				if busy > 0 {
					t.rBusy.caught(false)
				}
				t.rSpin.result(false)
				if contended && now > end {
					spinGate.Contended()
				}
				return
			}
			// Past the busy phase, give the CPU to whatever else is
			// runnable (the peer, on a busy host) while we wait: a pure
			// busy loop took CPU time the peer needed to answer. But
			// goroutines of ours that wait for a P get it at once: the
			// yield is the thread's, not the goroutine's, and a spin that
			// keeps its P beside them starves them (a crowded stop is no
			// failure of the spin: it records nothing).
			if now-start >= busy {
				if spinGate.CrowdedAt(now) || spinGate.ManyWaits() {
					return
				}
				schedYield()
				yielded = now
			}
		}
	}
}

// shmIdleGap: a reader whose last wait slept longer than this is on a
// connection that was idle (its data comes as keepalive probes, pings,
// requests after think time) and does not spin in its next wait: the spin
// would find nothing and cost up to the spin time of CPU (the writer's
// signal wakes it as it would after a spin). One wait that slept less
// turns the spin back on.
const shmIdleGap = time.Millisecond

// ---- write side ----

// room reserves need contiguous bytes at wpos, padding to the end of the
// ring if they do not fit there. false: not enough space now.
func (t *shmTransport) reserve(need uint64) (bool, error) {
	if err := t.rewind(); err != nil {
		return false, err
	}
	for {
		pos := t.wpos & t.tx.mask
		end := t.size - pos
		free := t.size - (t.wpos - t.whead)
		if end >= need && free >= need {
			return true, nil
		}
		if end < need && free >= end {
			binary.LittleEndian.PutUint64(t.tx.data[pos:], uint64(recPad)|(end-recHdr)<<32)
			t.wpos += end
			continue
		}
		if ok, err := t.refresh(); !ok || err != nil {
			return false, err
		}
	}
}

// shmHotWindow is how far into the data area a writer goes before, once
// the consumer has taken everything, it starts again at the beginning
// (rewind). Positions only grow, so a ring of 4 MiB that carries small
// messages puts each one on cache lines and a page that neither process
// touched for the last 4 MiB: with 64 connections (512 MiB of rings) the
// copies into and out of the rings were 14% of a server's CPU (rdmaperf
// -P 64, 64 B), most of it waiting for memory. Within a window of a page
// the lines stay in the CPUs' caches and the page in their TLBs.
const shmHotWindow = 4 << 10

// rewind starts the next record at the beginning of the data area when
// the writer is past shmHotWindow and the consumer has taken all it wrote:
// a recPad record to the end of the area, which the consumer skips as it
// skips the one before a record that would not fit.
//
// It looks at the consumer's head at most once per shmHotWindow written
// (rewindAt): a look reads a line the consumer writes at every record, and
// a look per record cost a stream of small messages 10-25% of its rate
// (rdmaperf -test stream -sizes 64,1K, shared memory, 3 rounds).
func (t *shmTransport) rewind() error {
	pos := t.wpos & t.tx.mask
	if pos < shmHotWindow || t.open || t.wpos < t.rewindAt {
		return nil
	}
	if t.whead != t.wpos {
		if _, err := t.refresh(); err != nil {
			return err
		}
		if t.whead != t.wpos {
			t.rewindAt = t.wpos + shmHotWindow
			return nil
		}
	}
	end := t.size - pos
	binary.LittleEndian.PutUint64(t.tx.data[pos:], uint64(recPad)|(end-recHdr)<<32)
	t.wpos += end
	return nil
}

// closeRec ends the open recData record.
func (t *shmTransport) closeRec() {
	if !t.open {
		return
	}
	t.open = false
	binary.LittleEndian.PutUint64(t.tx.data[t.recAt&t.tx.mask:], uint64(recData)|t.recN<<32)
	t.wpos = t.recAt + recHdr + (t.recN+7)&^7
}

// publish makes the closed records visible and wakes a sleeping consumer.
func (t *shmTransport) publish() {
	t.closeRec()
	t.tx.tail.Store(t.wpos)
	if t.tx.rwait.Load() != 0 && t.tx.rwait.CompareAndSwap(1, 0) && t.bell.mustSignal(t.tx.rgen.Load()) {
		signalFD(t.peerEv)
	}
}

// refresh rereads the consumer's head; it reports whether space was freed.
func (t *shmTransport) refresh() (bool, error) {
	h := t.tx.head.Load()
	if h == t.whead {
		return false, nil
	}
	if h < t.whead || h > t.wpos || h%8 != 0 {
		return false, errProtocol
	}
	t.whead = h
	return true, nil
}

// appendData copies as much of b as fits into the open (or a new) recData
// record; 0 when the ring is full.
func (t *shmTransport) appendData(b []byte) (int, error) {
	for {
		if !t.open {
			ok, err := t.reserve(recHdr + 8)
			if !ok || err != nil {
				return 0, err
			}
			t.open, t.recAt, t.recN = true, t.wpos, 0
		}
		start := t.recAt + recHdr
		pos := start & t.tx.mask
		lim := min(t.size-pos, t.whead+t.size-start, t.recMax())
		if lim <= t.recN {
			if _, err := t.refresh(); err != nil {
				return 0, err
			}
			lim = min(t.size-pos, t.whead+t.size-start, t.recMax())
		}
		if lim > t.recN {
			k := t.txCopy.copy(t.tx.data[pos+t.recN:pos+lim], b)
			t.recN += uint64(k)
			return k, nil
		}
		// The record cannot grow: publish it, so that the consumer copies
		// it out while we fill the next, and try a new one (reserve then
		// pads at the ring's end, or finds no space).
		t.publish()
	}
}

// shmRecordMax bounds a data record, and so how much a large write copies
// into the ring before the consumer may start copying it out: a 1 MiB
// payload in one record was copied in and then out, one after the other;
// in records of this size the two copies overlap, on two CPUs. Small
// writes are one record whatever this is.
//
// A READ response is copied out as it lands (its requester waits in the
// engine), so the first and last records' copies, which do not overlap,
// are what the pipeline adds to the transfer: its records are smaller.
// The copying path's writes are read out later by the program's Read,
// where a record's bookkeeping counts for more than the overlap. rdmaperf
// -buffers on shared memory, 4 interleaved rounds, medians, records of
// 32, 64 and 128 KiB for everything: 1 MiB from Buffers 12140, 11410 and
// 10777 MiB/s (4 MiB: 10056, 9888, 10073); 1 MiB copying 7254, 7664 and
// 7869; 64 KiB copying the same.
const (
	shmRecordMax      = 128 << 10
	shmPipedRecordMax = 32 << 10
)

func (t *shmTransport) recMax() uint64 {
	if t.piped {
		return min(t.size/4, shmPipedRecordMax)
	}
	return min(t.size/4, shmRecordMax)
}

// pipeline says whether the writes that follow carry a READ response
// (smaller records, above). Called by the transmit role's holder.
func (t *shmTransport) pipeline(on bool) { t.piped = on }

// writev copies bufs into the ring; gates, if not nil, holds beside each
// buffer the fence of the region it lies in, held only while a piece of it
// is copied. Once one of those is closed nothing more is read from its
// buffer, and writev returns errFenced.
func (t *shmTransport) writev(bufs [][]byte, gates []gateRef, wait bool) (int, error) {
	if !t.enter() {
		return 0, net.ErrClosed
	}
	defer t.exit()
	n := 0
	off := 0 // into bufs[i]; bufs itself is the caller's and stays as it is
	for i := 0; i < len(bufs); {
		if t.closed.Load() {
			return n, net.ErrClosed
		}
		if t.gone.Load() {
			return n, syscall.EPIPE
		}
		b := bufs[i][off:]
		if len(b) == 0 {
			i, off = i+1, 0
			continue
		}
		var g gateRef
		if gates != nil {
			g = gates[i]
		}
		if !g.enter() {
			t.publish()
			return n, errFenced
		}
		k, err := t.appendData(b)
		g.exit()
		if err != nil {
			t.publish()
			return n, err
		}
		if k == 0 {
			t.publish()
			if !wait {
				return n, nil
			}
			if err := t.waitSpace(); err != nil {
				return n, err
			}
			continue
		}
		n += k
		off += k
	}
	t.publish()
	return n, nil
}

// waitSpace waits until the consumer frees ring space: a bounded spin
// first, like the reader's (in a stream the consumer frees space within
// it, and the writer then never shares the eventfd with a sleeping
// reader), then sleep.
func (t *shmTransport) waitSpace() error {
	if spin := shmSpin.Load(); spin > 0 && spinGate.Enter() {
		freed := t.spinSpace(spin)
		spinGate.Leave()
		if freed {
			return nil
		}
	}
	t.wSeen.Store(t.whead)
	for {
		t.tx.wwait.Store(1)
		if h := t.tx.head.Load(); h != t.whead {
			t.tx.wwait.Store(0)
			return nil
		}
		if t.closed.Load() {
			return net.ErrClosed
		}
		if t.gone.Load() {
			return syscall.EPIPE
		}
		if err := t.sleep(sleepWriter); err != nil {
			return err
		}
	}
}

// spinSpace is the writer's spin for ring space, for up to spin ns, which
// the process's spin limit allowed. It reports whether space came; it
// gives up, as the reader's spin does, when goroutines wait for a P.
func (t *shmTransport) spinSpace(spin int64) bool {
	end := spinGate.Now() + spin
	contended, yielded := false, int64(0) // as spinRead's
	for i := 1; ; i++ {
		if t.tx.head.Load() != t.whead {
			return true
		}
		if i%64 == 0 {
			now := spinGate.Now()
			if yielded != 0 {
				slow, stop := spinGate.Yielded(time.Duration(now - yielded))
				if stop {
					return false
				}
				contended = contended || slow
			}
			if t.closed.Load() || t.gone.Load() || now > end || spinGate.CrowdedAt(now) {
				if contended && now > end {
					spinGate.Contended()
				}
				return false
			}
			schedYield()
			yielded = now
		}
	}
}

func (t *shmTransport) closeWrite() error {
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	t.publish()
	t.tx.wclosed.Store(1)
	signalFD(t.peerEv)
	return nil
}

// ackEvery: ACKs through shared memory cost no system call unless the
// requester sleeps, and each one completes the requester's WRs (and frees
// its send buffer) sooner, so the responder acknowledges more often than
// over TCP.
func (t *shmTransport) ackEvery(def int) int { return max(1, min(def, shmAckEvery)) }
