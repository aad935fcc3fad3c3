//go:build linux

package soft

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The doorbell: the wake-ups of a process's shared-memory connections to
// one peer process, gathered. Each connection otherwise sleeps on an
// eventfd of its own, which the peer signals whenever it finds the
// connection's reader (or writer) asleep; with many connections nearly
// every message found its reader asleep, and the signal (a write system
// call on the sender's side, an epoll wake-up on the receiver's) was a
// fifth of the CPU time of a round trip (rdmaperf -P 64, 64 B).
//
// Past the first shmGatherAfter connections to a peer process, a connection's setup
// passes the peer the doorbell's eventfd instead of one of its own
// (joinDoorbell). A connection's waits register with the doorbell and park
// on a channel; one goroutine per doorbell (ring) sleeps on the eventfd,
// and once woken looks at every registered wait and readies those whose
// condition came true, as the runtime's poller readies the goroutines of
// many descriptors. Each time it goes to sleep (an arming) it sets every
// registered wait's flag in its ring (rwait, wwait) and writes the
// arming's number beside rwait (rgen); the peer's producers signal an
// arming once between them (mustSignal): a burst across many connections
// costs the peer one signal, not one per connection.
//
// Nothing changes on the wire: the peer signals the eventfd it was given,
// as it always did, so a peer of an earlier version works with either
// kind, and the first connections to a peer keep their own eventfds (a
// single connection's wake-up stays one hand-off, not two).
//
// Only connections to one peer process share a doorbell (the process as
// SO_PEERCRED reports it on the socket that passed the rings, with its
// start time, so that a pid used again later is another process): what a
// peer can do with it, signal it, it could do with its own eventfd, and a
// signal makes the ring goroutine look, nothing more.

// shmGather: new connections gather on doorbells (tests turn it off).
var shmGather atomic.Bool

func init() { shmGather.Store(true) }

// shmPeerProc names a peer process: its pid and start time.
type shmPeerProc struct {
	pid   int32
	start uint64
}

// shmDoorbells holds the doorbells by peer process.
var shmDoorbells struct {
	mu sync.Mutex
	m  map[shmPeerProc]*shmDoorbell
}

// shmDoorbell is one peer process's: the count of connections to it (set
// up or being set up) and, once a second came, the eventfd they share and
// the goroutine that sleeps on it.
type shmDoorbell struct {
	proc     shmPeerProc
	refs     int // under shmDoorbells.mu
	gathered int // connections whose wake-ups come through it (under shmDoorbells.mu)

	fd     int // the eventfd; -1 until made
	file   *os.File
	rc     syscall.RawConn
	done   chan struct{}      // ring has returned
	parkFn func(uintptr) bool // park, made once: a method value allocates

	mu      sync.Mutex
	waits   []*shmWait
	armed   bool   // ring sleeps or is about to: the waits' flags are set
	gen     uint64 // the arming ring sleeps in (shmArmings)
	first   bool   // ring's next park callback is the first of its sleep
	wakeups atomic.Int64

	// rung is the peer's doorbell's arming that a producer of ours last
	// signalled for (mustSignal).
	rung atomic.Uint64
}

// shmGatherMax bounds the connections that gather on one doorbell; the
// ones past it keep their own eventfds. Each sleep of the doorbell's
// goroutine arms every registered wait (a write into each ring's header)
// and each wake-up looks at every one: the cost of a sleep and of a
// wake-up grows with the waits, and idle connections are waits too. With
// 1,000 idle connections to one peer on one doorbell the process used
// 19.5% of a core against 3.5% with an eventfd each (keepalives waking
// the doorbell, each wake-up and sleep walking 2,000 waits); 64 busy
// connections, where gathering pays, fit under the bound.
var shmGatherMax = 128

// shmGatherAfter is how many connections to a peer process keep their
// own eventfds before the next ones gather on a doorbell. A gathered
// wait is readied by the doorbell's goroutine, a hand-off more than a
// wait on its own eventfd, which a few connections pay without the
// gathering's gain: with a doorbell from the second connection on,
// go-redis on 4 connections (bench/'s redis-set-c4 and redis-get-c4 over
// shared memory) ran 76-95k ops/s at 17-22 us of CPU an op against
// 82-114k at 15-20 with none (3 rounds each, alternating), while 8 and
// 64 connections gained (rdmaperf -P 8: 2.77x -> 4.17x TCP's round trips).
var shmGatherAfter = 4

// shmArmings numbers the armings of all doorbells of the process, so that
// no two (one closed, a later one to the same peer) ever share a number.
var shmArmings atomic.Uint64

// mustSignal reports whether a producer that has just taken a ring's rwait
// (the consumer sleeps) must signal the consumer's eventfd, gen being the
// ring's rgen. Not when the consumer's doorbell was signalled already for
// that arming (by a producer to another of its rings): the doorbell's
// goroutine then wakes, and before it sleeps again it arms anew, which
// sets a later rgen in every ring it waits for and looks at each
// afterwards, after this producer's data. A ring of a consumer without a
// doorbell has rgen 0 and is always signalled. d is our count of the peer
// process (nil: not known), in which alone the number is looked up: what
// a peer writes in its rings bears on the signals to its own.
func (d *shmDoorbell) mustSignal(gen uint64) bool {
	if gen == 0 || d == nil {
		return true
	}
	if d.rung.Load() == gen {
		return false
	}
	d.rung.Store(gen)
	return true
}

// shmWait is one wait of a connection's (its reader's or its writer's)
// that may register with the doorbell.
type shmWait struct {
	t    *shmTransport
	who  int            // sleepReader or sleepWriter
	flag *atomic.Uint32 // the ring's word that makes the peer signal
	idx  int            // in waits; -1: not registered
	poke chan struct{}
}

// procStartTime is when process pid started (clock ticks after boot,
// /proc/PID/stat's 22nd field).
func procStartTime(pid int32) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// joinDoorbell counts l as a connection to the peer process pid, and,
// when another one to it is there, gathers l's wake-ups on their doorbell:
// l's own eventfd is closed and the doorbell's passed instead. Called
// before l's setup is sent. Any failure leaves l as it was.
func (l *shmLocal) joinDoorbell(pid int32) {
	if !shmGather.Load() || pid <= 0 || l.bell != nil {
		return
	}
	start, ok := procStartTime(pid)
	if !ok {
		return
	}
	proc := shmPeerProc{pid: pid, start: start}
	shmDoorbells.mu.Lock()
	defer shmDoorbells.mu.Unlock()
	if shmDoorbells.m == nil {
		shmDoorbells.m = make(map[shmPeerProc]*shmDoorbell)
	}
	d := shmDoorbells.m[proc]
	if d == nil {
		d = &shmDoorbell{proc: proc, fd: -1}
		shmDoorbells.m[proc] = d
	}
	if d.refs >= shmGatherAfter && d.fd < 0 {
		_ = d.open() // without it, l keeps its own eventfd
	}
	d.refs++
	l.bell = d
	if d.fd >= 0 && d.gathered < shmGatherMax {
		unix.Close(l.ev)
		l.ev = -1
		l.gathered = true
		d.gathered++
	}
}

// open makes the eventfd and starts ring. Under shmDoorbells.mu.
func (d *shmDoorbell) open() error {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return err
	}
	d.fd, d.file, d.rc, d.done = fd, f, rc, make(chan struct{})
	d.parkFn = d.park
	go d.ring()
	return nil
}

// release drops a connection's count (gathered: it was one of the
// doorbell's); the last one closes the eventfd, which ends ring, and
// waits for it to return (it has no wait left to look at, and returns at
// once).
func (d *shmDoorbell) release(gathered bool) {
	shmDoorbells.mu.Lock()
	d.refs--
	if gathered {
		d.gathered--
	}
	last := d.refs == 0
	if last {
		delete(shmDoorbells.m, d.proc)
	}
	shmDoorbells.mu.Unlock()
	if last && d.file != nil {
		d.file.Close()
		<-d.done
	}
}

// ring is the doorbell's goroutine: it sleeps on the eventfd with every
// registered wait's flag set, and once woken readies the waits that can
// go on, staying awake while it keeps finding some (the flags stay set:
// the peer signals the arming at most once more).
func (d *shmDoorbell) ring() {
	defer close(d.done)
	for {
		d.first = true
		err := d.rc.Read(d.parkFn)
		d.mu.Lock()
		d.armed = false
		d.mu.Unlock()
		if err != nil {
			return // closed: the last connection is gone
		}
		d.wakeups.Add(1)
		// Awake: look until a look finds nothing and no goroutine waits
		// for a P (whom the yield gives it, and whose work may bring more
		// data meanwhile); at most one empty look after a yield.
		empty := 0
		for {
			if d.dispatch() > 0 {
				empty = 0
			} else if empty++; empty > 1 || !spinGate.Crowded() {
				break
			}
			runtime.Gosched()
		}
	}
}

// park is ring's RawConn.Read callback. The first call of a sleep arms
// it: a new arming number and every registered wait's flag set, then a
// look at each wait. It runs once the read has begun, so that every
// signal sent for the arming (after the flags were set) wakes it: the
// poller forgets one that came before.
func (d *shmDoorbell) park(uintptr) bool {
	if !d.first {
		return true
	}
	d.first = false
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = true
	d.gen = shmArmings.Add(1)
	for _, w := range d.waits {
		w.arm(d.gen)
	}
	for _, w := range d.waits {
		if w.t.ready(w.who) {
			return true
		}
	}
	return false
}

// arm sets w's flag for the arming gen.
func (w *shmWait) arm(gen uint64) {
	if w.who == sleepReader {
		w.t.rx.rgen.Store(gen)
	}
	if w.flag.Load() == 0 {
		w.flag.Store(1)
	}
}

// dispatch readies the registered waits whose condition came true and
// returns how many. The others' flags stay set: a producer that takes one
// signals only if none did for this arming (mustSignal), and ring looks
// at every wait again before it sleeps.
func (d *shmDoorbell) dispatch() int {
	n := 0
	d.mu.Lock()
	for i := 0; i < len(d.waits); {
		w := d.waits[i]
		if w.t.ready(w.who) {
			d.remove(w)
			w.poke <- struct{}{}
			n++
			continue // the last one moved to i
		}
		i++
	}
	d.mu.Unlock()
	return n
}

// remove unregisters w. Under mu.
func (d *shmDoorbell) remove(w *shmWait) {
	last := len(d.waits) - 1
	if w.idx != last {
		m := d.waits[last]
		d.waits[w.idx] = m
		m.idx = w.idx
	}
	d.waits[last] = nil
	d.waits = d.waits[:last]
	w.idx = -1
}

// sleep waits, on behalf of w, whose flag is set and whose condition was
// just found false, until ring readies it. w registers first and then
// looks at its condition again: a signal whose data that look misses comes
// after the registration, so ring sees w when it wakes for it. While ring
// is awake the flag is cleared: it looks at w before it sleeps.
func (d *shmDoorbell) sleep(w *shmWait) {
	d.mu.Lock()
	w.idx = len(d.waits)
	d.waits = append(d.waits, w)
	if d.armed {
		w.arm(d.gen)
	} else {
		w.flag.Store(0)
	}
	d.mu.Unlock()
	if w.t.ready(w.who) {
		d.mu.Lock()
		if w.idx >= 0 {
			d.remove(w)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock() // readied meanwhile: take the token
	}
	<-w.poke
}
