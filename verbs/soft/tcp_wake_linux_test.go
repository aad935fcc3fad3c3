//go:build linux

package soft

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A read that parked keeps the clock reading it took as it woke (wokeAt),
// for the receive role's holder to take as the moment it lets go of the
// role instead of reading the clock again; setSpin forgets it, and so
// does a later wait that polling ended, which makes it a polling old.
func TestTCPReadKeepsItsWakeReading(t *testing.T) {
	l := &testSpinLimit{}
	useTCPSpinLimit(t, l)
	a, b := tcpPair(t)
	reader, err := newTCPTransport(a)
	require.NoError(t, err)
	writer, err := newTCPTransport(b)
	require.NoError(t, err)
	var h [hdrLen]byte
	sendAfter := func(d time.Duration) <-chan int64 {
		sent := make(chan int64, 1)
		go func() {
			time.Sleep(d)
			at := monotime()
			_, _ = writer.writev([][]byte{make([]byte, hdrLen)}, nil, true)
			sent <- at
		}()
		return sent
	}

	// Many waits: the read parks at once, and wakes when the input comes.
	l.manyWaits.Store(true)
	reader.setSpin(time.Millisecond)
	assert.Zero(t, reader.wokeAt(), "no wake-up yet")
	sent := sendAfter(20 * time.Millisecond)
	require.NoError(t, reader.readHeader(&h))
	after := monotime()
	at := <-sent
	woke := reader.wokeAt()
	assert.GreaterOrEqual(t, woke, at, "woke before the input was sent")
	assert.LessOrEqual(t, woke, after, "a reading from after the read returned")
	_, parked := reader.setSpin(time.Millisecond)
	assert.Greater(t, parked, 10*time.Millisecond, "parked until the input came")
	assert.Zero(t, reader.wokeAt(), "setSpin kept the last wait's reading")

	// Within one setSpin, a park, then a wait that polling ended: the
	// park's reading is dropped.
	reader.setSpin(10 * time.Second)
	sent = sendAfter(10 * time.Millisecond)
	require.NoError(t, reader.readHeader(&h))
	<-sent
	require.NotZero(t, reader.wokeAt(), "the park's wake-up")
	l.manyWaits.Store(false)
	sent = sendAfter(2 * time.Millisecond)
	require.NoError(t, reader.readHeader(&h))
	<-sent
	assert.Zero(t, reader.wokeAt(), "a reading from before the polling was kept")
	polled, _ := reader.setSpin(0)
	assert.Greater(t, polled, time.Duration(0), "the polling caught the input")
}

// checkHolds64: reader has read the header of a frame whose 64-byte
// payload was written with it in one call. The payload is here, to the
// byte, and what has been read of it is no longer.
func checkHolds64(t *testing.T, reader transport) {
	t.Helper()
	assert.True(t, payloadHere(reader, 64), "the payload came with the header")
	assert.False(t, payloadHere(reader, 65), "a byte more than came")
	require.NoError(t, reader.readPayload(make([]byte, 40), gateRef{}))
	assert.True(t, payloadHere(reader, 24))
	assert.False(t, payloadHere(reader, 25))
	require.NoError(t, reader.readPayload(make([]byte, 24), gateRef{}))
	assert.True(t, payloadHere(reader, 0), "an empty payload")
	assert.False(t, payloadHere(reader, 1), "nothing more")
}

// readAhead reads from tr's socket into its buffer until n bytes wait
// there, as one read of a header and a small payload brings them.
func readAhead(t *testing.T, tr *tcpTransport, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		if tr.w-tr.r < n {
			k, err := tr.readv(nil, tr.buf[tr.w:], false)
			tr.w += k
			return err == nil && tr.w-tr.r >= n
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

// payloadHere says whether the TCP transport holds the next n bytes, so
// that the responder copies them under its lock instead of reading them
// with the lock released.
func TestPayloadHereOnlyForBufferedBytes(t *testing.T) {
	a, b := tcpPair(t)
	reader, err := newTCPTransport(a)
	require.NoError(t, err)
	writer, err := newTCPTransport(b)
	require.NoError(t, err)
	_, err = writer.writev([][]byte{make([]byte, hdrLen+64)}, nil, true)
	require.NoError(t, err)
	var h [hdrLen]byte
	require.NoError(t, reader.readHeader(&h))
	// One read brought the header and the payload behind it.
	checkHolds64(t, reader)

	// A long payload is read with the lock released, even when it is all
	// here: a writer would wait for the copy.
	_, err = writer.writev([][]byte{make([]byte, hdrLen+2*payloadHereMax)}, nil, true)
	require.NoError(t, err)
	require.NoError(t, reader.readHeader(&h))
	readAhead(t, reader, 2*payloadHereMax)
	assert.True(t, payloadHere(reader, payloadHereMax))
	assert.False(t, payloadHere(reader, payloadHereMax+1), "a payload over payloadHereMax")
}
