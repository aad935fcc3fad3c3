//go:build linux

package soft

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A read that would block polls the socket for its spin before it parks
// (setSpin), and reports how long it polled before input came, or how
// long it parked; an interrupt ends the polling at once, as it ends a park.
func TestTCPReadPollsBeforeItParks(t *testing.T) {
	useTCPSpinLimit(t, &testSpinLimit{}) // one that lets every spin in
	a, b := tcpPair(t)
	reader, err := newTCPTransport(a)
	require.NoError(t, err)
	writer, err := newTCPTransport(b)
	require.NoError(t, err)
	var h [hdrLen]byte
	sent := make(chan struct{})
	sendAfter := func(d time.Duration) {
		go func() {
			time.Sleep(d)
			_, _ = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
			sent <- struct{}{}
		}()
	}

	// Input within the spin: seen without a park.
	reader.setSpin(10 * time.Second)
	sendAfter(2 * time.Millisecond)
	require.NoError(t, reader.readHeader(&h))
	<-sent
	polled, parked := reader.setSpin(100 * time.Microsecond)
	assert.Zero(t, parked, "caught by the polling")
	assert.GreaterOrEqual(t, polled, time.Millisecond, "after polling about 2 ms")

	// Input past it: the read parks, and says for how long.
	sendAfter(50 * time.Millisecond)
	require.NoError(t, reader.readHeader(&h))
	<-sent
	polled, parked = reader.setSpin(0)
	assert.Greater(t, parked, 10*time.Millisecond, "parked until the input came")
	assert.Zero(t, polled, "not caught by the polling")

	// Without a spin nothing is counted (and nothing polls).
	sendAfter(5 * time.Millisecond)
	require.NoError(t, reader.readHeader(&h))
	<-sent
	polled, parked = reader.setSpin(10 * time.Second)
	assert.Zero(t, polled)
	assert.Zero(t, parked)

	// An interrupt ends a long spin.
	go func() {
		time.Sleep(5 * time.Millisecond)
		reader.interrupt()
	}()
	start := time.Now()
	require.ErrorIs(t, reader.readHeader(&h), errInterrupted)
	assert.Less(t, time.Since(start), 5*time.Second, "the interrupt ended the polling")
}

// useTCPSpinLimit gives the TCP path's polling l until the test ends.
func useTCPSpinLimit(t *testing.T, l spinLimit) {
	prev := spinGate
	spinGate = l
	t.Cleanup(func() { spinGate = prev })
}

// The polling keeps to the process's spin limit: a wait that the limit
// does not let in, or whose spin finds goroutines waiting for a P, or
// whose yield finds the CPU wanted by sleepers' wake-ups, parks on the
// poller at once instead of polling out its budget; every place it takes
// among the spinners it gives back, and a parked reader counts as asleep
// for as long as it is parked.
func TestTCPPollingKeepsToSpinLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(l *testSpinLimit)
		in   bool // the spin was let in
	}{
		{"refused", func(l *testSpinLimit) { l.refuse.Store(true) }, false},
		{"crowded", func(l *testSpinLimit) { l.crowded.Store(true) }, true},
		{"slow yield among sleepers", func(l *testSpinLimit) {
			l.slowYields.Store(true)
			l.stopOnSlow.Store(true)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &testSpinLimit{}
			tc.set(l)
			useTCPSpinLimit(t, l)
			a, b := tcpPair(t)
			reader, err := newTCPTransport(a)
			require.NoError(t, err)
			writer, err := newTCPTransport(b)
			require.NoError(t, err)

			reader.setSpin(10 * time.Second)
			done := make(chan error, 1)
			var h [hdrLen]byte
			go func() { done <- reader.readHeader(&h) }()
			// The read parks within a fraction of its spin, and counts
			// as asleep meanwhile.
			deadline := time.Now().Add(5 * time.Second)
			for l.sleepers.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			require.Equal(t, int32(1), l.sleepers.Load(), "parked, not polling its 10 s out")
			_, err = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
			require.NoError(t, err)
			require.NoError(t, <-done)
			polled, parked := reader.setSpin(0)
			assert.Zero(t, polled, "not caught by polling")
			assert.Positive(t, parked, "parked until the input came")
			assert.Zero(t, l.sleepers.Load(), "awake: no longer counted")
			if tc.in {
				assert.Equal(t, int32(1), l.entered.Load(), "the spin was let in")
			} else {
				assert.Zero(t, l.entered.Load(), "refused: no spin")
			}
			assert.Equal(t, l.entered.Load(), l.left.Load(), "every place given back")
		})
	}
}

// A spin that runs out after a slow yield tells the limit (Contended), as
// the shared-memory reader's does, so that no spin begins for a while.
func TestTCPPollingReportsContention(t *testing.T) {
	l := &testSpinLimit{}
	l.slowYields.Store(true) // slow, but fewer sleepers than Ps: go on
	useTCPSpinLimit(t, l)
	a, b := tcpPair(t)
	reader, err := newTCPTransport(a)
	require.NoError(t, err)
	writer, err := newTCPTransport(b)
	require.NoError(t, err)
	reader.setSpin(2 * time.Millisecond)
	done := make(chan error, 1)
	var h [hdrLen]byte
	go func() { done <- reader.readHeader(&h) }()
	deadline := time.Now().Add(5 * time.Second)
	for l.sleepers.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, int32(1), l.sleepers.Load(), "parked once the spin ran out")
	_, err = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
	require.NoError(t, err)
	require.NoError(t, <-done)
	assert.Equal(t, int32(1), l.contended.Load(), "ran out after slow yields")
	assert.Equal(t, int32(1), l.left.Load())
}
