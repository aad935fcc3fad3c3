//go:build linux

package soft

import (
	"runtime"
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

// The polling keeps to the process's spin limit and to its own count of
// pollers: a wait that begins while a yield found the CPU wanted (the
// limit's BusyAt) or while the process's waits outnumber its Ps (ManyWaits),
// or with GOMAXPROCS reads polling already, or whose
// yield the limit says to stop at, parks on the poller at once (after one
// more look) instead of polling out its budget; every place it takes
// among the pollers it gives back.
func TestTCPPollingKeepsToSpinLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(t *testing.T, l *testSpinLimit)
	}{
		{"busy", func(_ *testing.T, l *testSpinLimit) { l.refuse.Store(true) }},
		{"more waits than Ps", func(_ *testing.T, l *testSpinLimit) { l.manyWaits.Store(true) }},
		{"pollers all taken", func(t *testing.T, _ *testSpinLimit) {
			n := int32(runtime.GOMAXPROCS(0))
			tcpPollers.Add(n)
			t.Cleanup(func() { tcpPollers.Add(-n) })
		}},
		{"slow yield among sleepers", func(_ *testing.T, l *testSpinLimit) {
			l.slowYields.Store(true)
			l.stopOnSlow.Store(true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &testSpinLimit{}
			useTCPSpinLimit(t, l)
			pollers := tcpPollers.Load()
			tc.set(t, l)
			a, b := tcpPair(t)
			reader, err := newTCPTransport(a)
			require.NoError(t, err)
			writer, err := newTCPTransport(b)
			require.NoError(t, err)

			reader.setSpin(10 * time.Second)
			done := make(chan error, 1)
			var h [hdrLen]byte
			go func() { done <- reader.readHeader(&h) }()
			// Input well after the read began, and long before its spin
			// ends: a polling read would catch it.
			time.Sleep(50 * time.Millisecond)
			_, err = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
			require.NoError(t, err)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("the read did not return")
			}
			polled, parked := reader.setSpin(0)
			assert.Zero(t, polled, "not caught by polling")
			assert.Positive(t, parked, "parked until the input came")
			if tc.name != "pollers all taken" {
				assert.Equal(t, pollers, tcpPollers.Load(), "every place given back")
			}
		})
	}
}

// A spin that runs out after a slow yield tells the limit (Contended), as
// the shared-memory reader's does, so that no spin begins for a while; and
// goroutines waiting for a P (Crowded) get it from the polling, which then
// carries on: input within the spin is still caught.
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
	time.Sleep(20 * time.Millisecond)
	_, err = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
	require.NoError(t, err)
	require.NoError(t, <-done)
	_, parked := reader.setSpin(0)
	assert.Positive(t, parked, "parked once the spin ran out")
	assert.Equal(t, int32(1), l.contended.Load(), "ran out after slow yields")

	l.slowYields.Store(false)
	l.crowded.Store(true)
	reader.setSpin(10 * time.Second)
	go func() { done <- reader.readHeader(&h) }()
	time.Sleep(20 * time.Millisecond)
	_, err = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
	require.NoError(t, err)
	require.NoError(t, <-done)
	_, parked = reader.setSpin(0)
	assert.Zero(t, parked, "crowded: the polling gave its P away and went on")
}

// A wait's polling gives up only its P for its first tcpPollGoschedFor
// (where a quiet host's answers come: a sched_yield per poll there halved
// one connection's round trips), and yields the thread's CPU, timed for
// the limit, after that.
func TestTCPPollingYieldsTheCPUOnlyLater(t *testing.T) {
	l := &testSpinLimit{}
	useTCPSpinLimit(t, l)
	a, _ := tcpPair(t)
	tr, err := newTCPTransport(a)
	require.NoError(t, err)
	tr.setSpin(10 * time.Second)
	t.Cleanup(tr.endSpin)
	require.True(t, tr.polling(), "the wait polls")
	require.True(t, tr.polling())
	assert.Zero(t, l.yields.Load(), "no CPU yield in the wait's first moments")
	time.Sleep(2 * tcpPollGoschedFor)
	require.True(t, tr.polling())
	assert.Equal(t, int32(1), l.yields.Load(), "past them, the poll yields the CPU and times it")
}
