package soft

import (
	"time"

	"github.com/rdmanet/rdma/internal/spinlimit"
)

// spinGate is what the shared-memory transport's spins ask before and
// while they spin: the process's spin limit (internal/spinlimit), which
// bounds the spinners of the process, ends a spin when goroutines wait
// for a P, and stops spinning for a while when a yield finds the CPU
// wanted. A variable so that tests can give the spins a gate of their
// own.
var spinGate spinLimit = spinlimit.Process()

// spinLimit is spinlimit.Limit's part that the spins use.
type spinLimit interface {
	Enter() bool
	EnterAt(now int64) bool
	BusyAt(now int64) bool
	Leave()
	Now() int64
	Crowded() bool
	CrowdedAt(now int64) bool
	ManyWaits() bool
	Yielded(d time.Duration) (slow, stop bool)
	Contended()
	Sleeping(delta int32)
}

// The first part of a shared-memory reader's spin polls the ring without
// yielding the CPU. A yield is a system call, and on a busy host it lets
// any runnable task have the CPU for its time slice; when the writer runs
// on another CPU, what the reader waits for mostly comes within a few
// microseconds, so polling alone sees it sooner and cheaper. When the
// writer shares the reader's CPU, nothing can come until the reader yields,
// and the busy phase is pure delay: so it is skipped while it keeps
// failing, and tried again every busySpinProbe-th wait. Measured with
// rdmaperf -s/-c, 64 B round trips, client and server pinned: on two CPUs
// p50 4.2-4.4 us yielding at once, 2.6 us after a 3 us busy phase (CPU per
// round trip 17-24 -> 11-16 us); on one CPU 12.7 us yielding at once, 18.6 us
// with the busy phase always on.
const (
	busySpinTime   = 3 * time.Microsecond
	busySpinMisses = 4  // failures in a row that turn the busy phase off
	busySpinProbe  = 16 // while off, every this many waits try it again
)

// busySpin decides the busy phase of each wait of one reader (one
// goroutine at a time).
type busySpin struct{ f failing }

// budget is the busy phase of the next wait, within a spin of spin ns.
func (b *busySpin) budget(spin int64) int64 {
	if !b.f.try() {
		return 0
	}
	return min(int64(busySpinTime), spin)
}

// caught records how a wait that had a busy phase ended: what it waited
// for came within the busy phase, or not (later, or never).
func (b *busySpin) caught(inBusy bool) { b.f.result(inBusy) }

// failing turns a phase of a reader's waits off while it keeps failing:
// off after busySpinMisses failures in a row, then tried once every
// busySpinProbe-th wait, and on again after a success. The busy phase is
// one such; the whole spin is another (shmTransport.wait): past the busy
// phase the spin yields the CPU between looks for up to the reader's spin
// time, which catches a writer that answers within tens of microseconds,
// but a reader whose data keeps coming later than that (a request after
// think time) spins for nothing and sleeps anyway. (Gaps of over a
// millisecond, an idle connection's probes and pings, are shmIdleGap's:
// that rule, not this one, took 1,000 idle connections from 8% of a CPU
// to 6%; this one covers the gaps between the spin and a millisecond, and
// was not measured apart.)
type failing struct {
	misses uint8 // waits in a row whose phase failed
	skip   uint8 // waits left without the phase
}

// try reports whether the next wait has the phase.
func (f *failing) try() bool {
	if f.skip > 0 {
		f.skip--
		return false
	}
	return true
}

// result records how a wait that had the phase ended.
func (f *failing) result(ok bool) {
	if ok {
		f.misses = 0
		return
	}
	if f.misses < busySpinMisses {
		f.misses++
	}
	if f.misses >= busySpinMisses {
		f.skip = busySpinProbe - 1
	}
}
