package spinlimit

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLimit is a Limit on a clock that the test moves, with procs Ps and
// *runnable goroutines waiting for one; looks counts the looks at the
// scheduler.
func testLimit(procs int, runnable *atomic.Uint64, looks *atomic.Int64) (*Limit, *atomic.Int64) {
	l := New(func() int { return procs }, func() uint64 {
		looks.Add(1)
		return runnable.Load()
	})
	var clock atomic.Int64
	l.now = clock.Load
	return l, &clock
}

// With n Ps, n-1 goroutines spin at once (one with a single P); past
// that Enter refuses, and Leave makes room again.
func TestEnterRefusesPastTheLimit(t *testing.T) {
	for _, tc := range []struct{ procs, spinners int }{{1, 1}, {2, 1}, {4, 3}} {
		var runnable atomic.Uint64
		var looks atomic.Int64
		l, _ := testLimit(tc.procs, &runnable, &looks)
		for i := range tc.spinners {
			require.True(t, l.Enter(), "procs %d, spinner %d", tc.procs, i+1)
		}
		assert.False(t, l.Enter(), "procs %d: one spinner past the limit", tc.procs)
		assert.Equal(t, tc.spinners, l.Spinning())
		l.Leave()
		assert.True(t, l.Enter(), "procs %d: room again after Leave", tc.procs)
	}
}

// Goroutines waiting for a P make Enter refuse and Crowded tell a spinner
// to give up; once none waits (at the next look) spinning is allowed.
func TestCrowdedWhileGoroutinesWaitForAP(t *testing.T) {
	var runnable atomic.Uint64
	var looks atomic.Int64
	l, clock := testLimit(4, &runnable, &looks)
	runnable.Store(2)
	assert.True(t, l.Crowded())
	assert.False(t, l.Enter(), "others wait for a P")
	assert.Zero(t, l.Spinning())

	runnable.Store(0)
	assert.True(t, l.Crowded(), "the last look stands until sampleEvery passed")
	clock.Add(int64(sampleEvery))
	assert.False(t, l.Crowded())
	assert.True(t, l.Enter())
}

// The scheduler is looked at once per sampleEvery while goroutines wait
// for a P (calmSampleEvery while none does), however many spinners ask,
// and one looks at a time.
func TestCrowdedLooksOncePerSample(t *testing.T) {
	var runnable atomic.Uint64
	var looks atomic.Int64
	l, clock := testLimit(2, &runnable, &looks)
	runnable.Store(1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Crowded()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), looks.Load(), "800 asks, one look")
	clock.Add(int64(sampleEvery) - 1)
	l.Crowded()
	assert.Equal(t, int64(1), looks.Load())
	clock.Add(1)
	runnable.Store(0)
	assert.False(t, l.Crowded())
	assert.Equal(t, int64(2), looks.Load(), "crowded: looked again after sampleEvery")

	clock.Add(int64(sampleEvery))
	l.Crowded()
	assert.Equal(t, int64(2), looks.Load(), "calm: not yet")
	clock.Add(int64(calmSampleEvery - sampleEvery))
	l.Crowded()
	assert.Equal(t, int64(3), looks.Load(), "calm: after calmSampleEvery")
}

// A slow yield (another thread had the CPU) stops the spin and keeps new
// spins from beginning for busyFor when at least as many readers sleep as
// there are Ps; with fewer it only says it was slow, and the spin goes
// on; Contended (a spin that ran out after one) stops spinning too. A
// quick yield does nothing.
func TestSlowYieldStopsSpinning(t *testing.T) {
	var runnable atomic.Uint64
	var looks atomic.Int64
	l, clock := testLimit(2, &runnable, &looks)
	slow, stop := l.Yielded(time.Microsecond)
	assert.False(t, slow || stop, "a quick yield: the CPU was idle")

	l.Sleeping(1)
	slow, stop = l.Yielded(slowYield + 1)
	assert.True(t, slow)
	assert.False(t, stop, "one reader asleep, two Ps: spin on")
	assert.True(t, l.Enter())
	l.Leave()

	l.Sleeping(1)
	slow, stop = l.Yielded(slowYield + 1)
	assert.True(t, slow && stop, "two readers asleep: their wake-ups want the CPUs")
	assert.False(t, l.Enter(), "no spin begins meanwhile")
	clock.Add(int64(busyFor) - 1)
	assert.False(t, l.Enter())
	clock.Add(1)
	assert.True(t, l.Enter(), "busyFor later")
	l.Leave()

	l.Contended()
	assert.False(t, l.Enter(), "a spin ran out after a slow yield")
	assert.True(t, l.BusyAt(l.Now()), "BusyAt says so too")
	clock.Add(int64(busyFor))
	assert.False(t, l.BusyAt(l.Now()))
	assert.True(t, l.Enter())
}

// The process's Limit reads the runtime's runnable count without
// allocating: spins are on the data path.
func TestProcessLimitAllocs(t *testing.T) {
	process.sampledAt.Store(-int64(calmSampleEvery)) // look now
	allocs := testing.AllocsPerRun(100, func() {
		process.sampledAt.Store(-int64(calmSampleEvery))
		if Enter() {
			Leave()
		}
		Yielded(0)
		Sleeping(1)
		Sleeping(-1)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, int32(maxSpinners(runtime.GOMAXPROCS(0))), process.max.Load())
}

// More waits than Ps make Enter refuse; as waits end, spinning is allowed
// again.
func TestManyWaitsRefuseSpins(t *testing.T) {
	var runnable atomic.Uint64
	var looks atomic.Int64
	l, _ := testLimit(2, &runnable, &looks)
	l.Waiting(2)
	assert.False(t, l.ManyWaits(), "as many waits as Ps")
	require.True(t, l.Enter())
	l.Leave()
	l.Waiting(1)
	assert.True(t, l.ManyWaits())
	assert.False(t, l.Enter(), "three waits on two Ps")
	l.Waiting(-1)
	assert.True(t, l.Enter(), "two again")
	l.Leave()
}
