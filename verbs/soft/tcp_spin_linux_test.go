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
