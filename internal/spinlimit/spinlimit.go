// Package spinlimit is the process-wide view of busy polling: how many
// goroutines spin at once, whether goroutines wait for a P, and whether
// a spinner's CPU is wanted by other threads. A waiter that spins (the
// poll role's spin, soft's shared-memory reader and writer) keeps its P
// and its CPU; alone it is the lowest latency, but with many connections
// the spinners take the Ps and CPUs that their peers and the other
// connections need: with 64 connections on 2 CPUs (rdmaperf -P 64 over
// soft's shared memory) a round trip's p99 was 7-25 ms against TCP's
// 3-9 ms. A spin asks Enter first and Leave when done; at each of its
// yields it asks Crowded whether goroutines wait for a P, and tells
// Yielded how long its yield of the CPU took; either can end the spin,
// and the waiter sleeps, giving its P and CPU away. So a spin uses only
// a CPU that would otherwise idle.
package spinlimit

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// sampleEvery is how often the scheduler is looked at, at most, for all
// the spinners of the process together, while the last look found
// goroutines waiting for a P; calmSampleEvery while it did not. A read of
// the runnable count takes the scheduler's lock (60-160 ns, no
// allocation). Once per 10 us, a single connection's 64 B round trips
// (6 us) paid one about every other wait: 3-5% on their median in
// interleaved rounds against the build without the limit (5.93-6.00 us).
// Once per 40 us while calm: 1.5-3.2% (medians of 4-5 rounds, three
// sets). Once per 50 us throughout, with 64 connections a look that old
// let spins begin beside goroutines that by then waited for a P
// (rdmaperf -P 64, 3 interleaved rounds on the loaded host: p99 12-16 ms
// against 3-11 ms with 10 us, TCP's 2-12 ms).
const (
	sampleEvery     = 10 * time.Microsecond
	calmSampleEvery = 40 * time.Microsecond
)

// slowYield is how long a yield of the CPU (sched_yield) may take while
// nothing else wanted that CPU: a system call's cost, a microsecond or
// so. Longer, the kernel ran another thread meanwhile (of another
// process, or of ours) that had waited for the CPU, and the spin was
// taking its time, not idle time (Yielded says what follows). busyFor is
// how long no spin of the process begins after a spin was found taking
// others' CPU time: on a host whose CPUs are taken the waits sleep, and
// a spin tries again after it. With 5 us a single connection's round
// trips on the loaded 2-CPU host lost their spins too often.
const (
	slowYield = 20 * time.Microsecond
	busyFor   = 500 * time.Microsecond
)

// Limit bounds the goroutines that spin at once and tells them when to
// give up. New makes one; the process's own is behind Enter, Leave,
// Crowded and Yielded.
type Limit struct {
	spinners  atomic.Int32
	max       atomic.Int32 // spinners allowed at once, from procs at the last look
	sampledAt atomic.Int64 // when the scheduler was last looked at (ns since base)
	crowded   atomic.Bool  // goroutines waited for a P at that look
	sampling  atomic.Bool  // a caller is looking: the others take the last look
	busyUntil atomic.Int64 // no spin begins before this (ns since base): a yield found its CPU wanted
	sleepers  atomic.Int32 // readers asleep (Sleeping)
	waits     atomic.Int32 // connections' waits for completions (Waiting)
	procsSeen atomic.Int32 // GOMAXPROCS at the last look

	base     time.Time
	procs    func() int    // GOMAXPROCS
	runnable func() uint64 // goroutines waiting for a P
	now      func() int64  // ns since base
}

// New returns a Limit that learns GOMAXPROCS from procs and the count of
// goroutines waiting for a P from runnable.
func New(procs func() int, runnable func() uint64) *Limit {
	l := &Limit{base: time.Now(), procs: procs, runnable: runnable}
	l.now = func() int64 { return int64(time.Since(l.base)) }
	l.setProcs(procs())
	l.sampledAt.Store(-int64(calmSampleEvery)) // the first ask looks
	return l
}

// maxSpinners is how many goroutines may spin at once with procs Ps: all
// but one, so that a goroutine made runnable (by the network poller, by
// a timer) finds a P without waiting for a spin to end; one where there
// is a single P (Crowded ends that spin when anything else is runnable).
func maxSpinners(procs int) int { return max(1, procs-1) }

// setProcs takes in GOMAXPROCS, which may change while the process runs.
func (l *Limit) setProcs(procs int) {
	l.procsSeen.Store(int32(procs))
	l.max.Store(int32(maxSpinners(procs)))
}

// Enter asks to begin a spin. It refuses when more waits run than the
// process has Ps (ManyWaits), when goroutines wait for a P,
// when a spinner's yield found its CPU wanted less than busyFor ago, and
// when as many goroutines spin already as the limit allows; the caller
// then sleeps at once instead. A true Enter is paired with Leave.
func (l *Limit) Enter() bool { return l.EnterAt(l.now()) }

// EnterAt is Enter at now, a reading of Now.
func (l *Limit) EnterAt(now int64) bool {
	if l.ManyWaits() || l.crowdedAt(now) || now < l.busyUntil.Load() {
		return false
	}
	for {
		n := l.spinners.Load()
		if n >= l.max.Load() {
			return false
		}
		if l.spinners.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// BusyAt reports, at now (a reading of Now), whether a yield found the
// CPU wanted within busyFor, when no spin begins. For a poll that bounds
// its pollers by a count of its own and takes no place here (soft's TCP
// path, whose polls are system calls that yield the CPU).
func (l *Limit) BusyAt(now int64) bool { return now < l.busyUntil.Load() }

// Leave ends a spin that Enter allowed.
func (l *Limit) Leave() { l.spinners.Add(-1) }

// Spinning is how many goroutines spin now.
func (l *Limit) Spinning() int { return int(l.spinners.Load()) }

// Crowded reports whether goroutines waited for a P at the last look at
// the scheduler, looking again if that was sampleEvery ago or more
// (calmSampleEvery if that look found none). Only
// one caller looks at a time; the others take the last look's answer.
// A spinner that finds the process crowded stops and sleeps, which gives
// its P to them: a yield of the thread (sched_yield) does not, and a
// spin that keeps its P while others wait for one starves them.
func (l *Limit) Crowded() bool { return l.crowdedAt(l.now()) }

// Now is the Limit's clock (ns), which a spinner that reads the clock
// anyway uses for its own timing, to hand the reading to CrowdedAt: a
// reading costs as much as the rest of a check (35 ns on the 2-CPU host).
func (l *Limit) Now() int64 { return l.now() }

// CrowdedAt is Crowded at now, a reading of Now.
func (l *Limit) CrowdedAt(now int64) bool { return l.crowdedAt(now) }

func (l *Limit) crowdedAt(now int64) bool {
	every := int64(sampleEvery)
	if !l.crowded.Load() {
		every = int64(calmSampleEvery)
	}
	if now-l.sampledAt.Load() >= every && l.sampling.CompareAndSwap(false, true) {
		l.crowded.Store(l.runnable() > 0)
		l.setProcs(l.procs())
		l.sampledAt.Store(now)
		l.sampling.Store(false)
	}
	return l.crowded.Load()
}

// Yielded takes in how long a spinner's yield of the CPU took: slow, past
// slowYield, it found the CPU wanted by another thread. A slow yield
// stops the spin at once, and no spin of the process begins for busyFor,
// when at least as many readers of the process sleep as it has Ps
// (Sleeping): their wake-ups want those CPUs, and a spin beside them
// holds a P whose thread the kernel has taken while they wait. Fewer, the spin
// goes on (the thread that had the CPU was often the peer, answering: a
// single connection's 64 KiB stream lost a third of its rate when every
// slow yield stopped spinning) and reports to Contended if it runs out.
func (l *Limit) Yielded(d time.Duration) (slow, stop bool) {
	if d <= slowYield {
		return false, false
	}
	if l.sleepers.Load() < l.procsSeen.Load() {
		return true, false
	}
	l.busyUntil.Store(l.now() + int64(busyFor))
	return true, true
}

// Contended takes in a spin that ran out without catching what it waited
// for after a slow yield: no spin of the process begins for busyFor.
func (l *Limit) Contended() { l.busyUntil.Store(l.now() + int64(busyFor)) }

// Waiting counts the waits of the process's connections for completions
// or input (+1 as one begins, -1 as it ends), whether they spin or sleep.
func (l *Limit) Waiting(delta int32) { l.waits.Add(delta) }

// ManyWaits reports whether more waits run (Waiting) than the process
// has Ps. Then no spin begins and a running one stops: each wait's
// answer wants a CPU when it comes, so the CPUs have work without the
// spins, and a spin's time is taken from the answers. Worse, a waiter
// that sleeps is parked on the runtime's network poller, which the
// scheduler looks at only when a P has nothing else to run (or sysmon,
// every 10 ms at most): spinners that keep every P busy delay those
// wake-ups, and the sleepers' round trips took milliseconds. rdmaperf
// -test latency -sizes 64 -P 8 on soft's TCP path, spinning beside
// many waits against none: 60-61k round trips/s against 91-111k, p99
// 4.1 ms against 0.24-0.46 ms, 32 us of CPU a round trip against 17-21
// (docs/measurements/2026-11-29-many-waits.md). A single connection, or
// a few, keep their spins.
func (l *Limit) ManyWaits() bool { return l.waits.Load() > l.procsSeen.Load() }

// Sleeping counts the readers that sleep (+1 as a sleep begins, -1 as it
// ends).
func (l *Limit) Sleeping(delta int32) { l.sleepers.Add(delta) }

// runnableMetric is the scheduler's count of goroutines waiting for a P.
const runnableMetric = "/sched/goroutines/runnable:goroutines"

// sample is the metric read, by one caller at a time (the process
// Limit's sampling flag).
var sample = []metrics.Sample{{Name: runnableMetric}}

// runnableGoroutines reads runnableMetric. A runtime without it reads as
// none: the spinner count and the yields alone then limit spinning.
func runnableGoroutines() uint64 {
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// process is the Limit of this process's spinners.
var process = New(func() int { return runtime.GOMAXPROCS(0) }, runnableGoroutines)

// Process is the Limit of this process's spinners, which Enter, Leave,
// Crowded and Yielded ask.
func Process() *Limit { return process }

// Enter asks the process's Limit to begin a spin (Limit.Enter).
func Enter() bool { return process.Enter() }

// Leave ends a spin that Enter allowed (Limit.Leave).
func Leave() { process.Leave() }

// Crowded reports whether goroutines of the process wait for a P
// (Limit.Crowded).
func Crowded() bool { return process.Crowded() }

// Yielded takes in a yield of the CPU by a spinner of the process
// (Limit.Yielded).
func Yielded(d time.Duration) (slow, stop bool) { return process.Yielded(d) }

// Contended takes in a spin of the process that ran out after a slow
// yield (Limit.Contended).
func Contended() { process.Contended() }

// Waiting counts a wait of the process's connections (Limit.Waiting).
func Waiting(delta int32) { process.Waiting(delta) }

// Sleeping counts a reader of the process that sleeps (Limit.Sleeping).
func Sleeping(delta int32) { process.Sleeping(delta) }
