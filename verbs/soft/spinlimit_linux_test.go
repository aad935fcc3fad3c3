package soft

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSpinLimit is a spin limit that a test sets: whether Enter refuses,
// what Crowded answers, whether every yield is slow and whether a slow
// yield stops the spin; it counts the spins let in and left, the spins
// reported contended, and the readers asleep.
type testSpinLimit struct {
	refuse, crowded, slowYields, stopOnSlow atomic.Bool
	manyWaits                               atomic.Bool
	entered, left, contended, sleepers      atomic.Int32
	yields                                  atomic.Int32 // timed yields (Yielded)
}

func (l *testSpinLimit) Enter() bool { return l.EnterAt(0) }

func (l *testSpinLimit) EnterAt(int64) bool {
	if l.refuse.Load() {
		return false
	}
	l.entered.Add(1)
	return true
}

func (l *testSpinLimit) BusyAt(int64) bool { return l.refuse.Load() }

func (l *testSpinLimit) Leave()               { l.left.Add(1) }
func (l *testSpinLimit) Now() int64           { return monotime() }
func (l *testSpinLimit) Crowded() bool        { return l.crowded.Load() }
func (l *testSpinLimit) CrowdedAt(int64) bool { return l.crowded.Load() }
func (l *testSpinLimit) Contended()           { l.contended.Add(1) }
func (l *testSpinLimit) ManyWaits() bool      { return l.manyWaits.Load() }
func (l *testSpinLimit) Sleeping(delta int32) { l.sleepers.Add(delta) }
func (l *testSpinLimit) Yielded(time.Duration) (slow, stop bool) {
	l.yields.Add(1)
	slow = l.slowYields.Load()
	return slow, slow && l.stopOnSlow.Load()
}

// useSpinLimit gives the shared-memory spins l until the test ends, and
// a one-second spin, so that a wait that sleeps within a fraction of that
// did not spin it out.
func useSpinLimit(t *testing.T, l spinLimit) {
	prevLimit := spinGate
	prevSpin := SetSharedMemorySpin(time.Second)
	spinGate = l
	t.Cleanup(func() {
		spinGate = prevLimit
		SetSharedMemorySpin(prevSpin)
	})
}

// readerAsleep reports whether b's reader is asleep on its eventfd within d.
func readerAsleep(b *shmTransport, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if b.rx.rwait.Load() != 0 {
			return true
		}
	}
	return false
}

// readHeaderAsync reads a header from b on a goroutine of its own.
func readHeaderAsync(b *shmTransport) chan error {
	done := make(chan error, 1)
	go func() {
		var h [hdrLen]byte
		done <- b.readHeader(&h)
	}()
	return done
}

// How the process's spin limit steers a reader's wait on an empty ring:
// allowed and nothing else wants the CPU, it spins (the spin's length);
// refused, it sleeps at once; goroutines waiting for a P or a slow yield
// end the spin and the reader sleeps. Every spin let in is left.
func TestShmReaderSpinFollowsTheSpinLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(l *testSpinLimit)
		spins  bool  // the reader is still awake 100 ms in
		enters int32 // spins let in
	}{
		{"allowed", func(*testSpinLimit) {}, true, 1},
		{"refused", func(l *testSpinLimit) { l.refuse.Store(true) }, false, 0},
		{"crowded", func(l *testSpinLimit) { l.crowded.Store(true) }, false, 1},
		{"slow yield among sleepers", func(l *testSpinLimit) {
			l.slowYields.Store(true)
			l.stopOnSlow.Store(true)
		}, false, 1},
		{"slow yield alone", func(l *testSpinLimit) { l.slowYields.Store(true) }, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &testSpinLimit{}
			tc.set(l)
			useSpinLimit(t, l)
			a, b := shmPair(t)
			done := readHeaderAsync(b)
			if tc.spins {
				time.Sleep(100 * time.Millisecond)
				assert.Zero(t, b.rx.rwait.Load(), "spinning, not asleep")
			} else {
				assert.True(t, readerAsleep(b, 300*time.Millisecond), "asleep well within the one-second spin")
			}
			var hdr [hdrLen]byte
			require.NoError(t, writeFrame(a, &hdr, nil, nil))
			require.NoError(t, <-done)
			assert.Equal(t, tc.enters, l.entered.Load(), "spins let in")
			assert.Equal(t, l.entered.Load(), l.left.Load(), "every spin let in is left")
		})
	}
}

// A writer waiting for ring space spins only when the spin limit lets it,
// and gives up when goroutines wait for a P: it sleeps on the eventfd
// (wwait) well within its one-second spin.
func TestShmWriterSpinFollowsTheSpinLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(l *testSpinLimit)
	}{
		{"refused", func(l *testSpinLimit) { l.refuse.Store(true) }},
		{"crowded", func(l *testSpinLimit) { l.crowded.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &testSpinLimit{}
			tc.set(l)
			useSpinLimit(t, l)
			a, b := shmPair(t)
			payload := make([]byte, 3*defaultShmRing)
			n, err := a.writev([][]byte{payload}, nil, false)
			require.NoError(t, err)
			errc := make(chan error, 1)
			go func() {
				_, err := a.writev([][]byte{payload[n:]}, nil, true)
				errc <- err
			}()
			asleep := false
			for end := time.Now().Add(300 * time.Millisecond); !asleep && time.Now().Before(end); time.Sleep(time.Millisecond) {
				asleep = a.tx.wwait.Load() != 0
			}
			assert.True(t, asleep, "the writer sleeps well within its one-second spin")
			got := make([]byte, len(payload))
			require.NoError(t, b.readPayload(got, gateRef{}))
			require.NoError(t, <-errc)
			assert.Equal(t, l.entered.Load(), l.left.Load(), "every spin let in is left")
		})
	}
}

// A reader that may not spin while goroutines wait for a P lets them run
// once before it sleeps, and looks again: on one P, a writer made
// runnable just before the read writes meanwhile, and the reader takes
// the frame without sleeping (so the writer does not signal the eventfd).
// With nobody waiting for a P it sleeps at once. One yield does not
// always run the writer: the scheduler takes a goroutine from the global
// queue (where Gosched puts the reader) first on every 61st tick, and
// the runtime's own goroutines may come first; so the crowded case has
// three tries (a reader that never yields sleeps in all of them).
func TestShmReaderYieldsOnceWhenCrowded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	read := func(crowded bool) time.Duration {
		l := &testSpinLimit{}
		l.refuse.Store(true)
		l.crowded.Store(crowded)
		useSpinLimit(t, l)
		a, b := shmPair(t)
		var hdr [hdrLen]byte
		wrote := make(chan error, 1)
		go func() { wrote <- writeFrame(a, &hdr, nil, nil) }()
		var h [hdrLen]byte
		require.NoError(t, b.readHeader(&h))
		require.NoError(t, <-wrote)
		return b.rSlept
	}
	var slept []time.Duration
	for range 3 {
		d := read(true)
		if d == 0 {
			slept = nil
			break
		}
		slept = append(slept, d)
	}
	assert.Empty(t, slept, "crowded: the writer ran while the reader yielded (slept %v)", slept)
	assert.NotZero(t, read(false), "nobody waited for a P: the reader slept")
}

// A spin whose yields were slow and that ran out without its data
// reports itself contended (no spin of the process then begins for a
// while); one that caught its data, or whose yields were quick, does
// not. A sleeping reader counts among the sleepers while it sleeps.
func TestShmReaderSpinReportsContention(t *testing.T) {
	for _, tc := range []struct {
		name      string
		slow      bool
		late      bool // the data comes after the spin
		contended int32
	}{
		{"slow, ran out", true, true, 1},
		{"slow, caught", true, false, 0},
		{"quick, ran out", false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &testSpinLimit{}
			l.slowYields.Store(tc.slow)
			useSpinLimit(t, l)
			// A spin that must catch its data lasts far longer than the
			// writer can be kept from running on a loaded host; one that
			// must run out, briefly.
			spin := 20 * time.Millisecond
			if !tc.late {
				spin = time.Minute
			}
			SetSharedMemorySpin(spin)
			a, b := shmPair(t)
			done := readHeaderAsync(b)
			if tc.late {
				require.True(t, readerAsleep(b, 5*time.Second), "asleep once the spin ran out")
				assert.Equal(t, int32(1), l.sleepers.Load(), "asleep: counted")
			} else {
				time.Sleep(5 * time.Millisecond)
			}
			var hdr [hdrLen]byte
			require.NoError(t, writeFrame(a, &hdr, nil, nil))
			require.NoError(t, <-done)
			assert.Equal(t, tc.contended, l.contended.Load())
			assert.Zero(t, l.sleepers.Load(), "awake: no longer counted")
		})
	}
}
