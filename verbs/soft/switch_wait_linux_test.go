//go:build linux

package soft

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// At the peer's marker the reader waits for its own exchange at most
// switchWait: a marker whose exchange never comes through ends the read
// with an error that says so, and the transport still closes cleanly.
func TestSwitchReadWaitsAtMostSwitchWait(t *testing.T) {
	defer func(d time.Duration) { switchWait = d }(switchWait)
	switchWait = 100 * time.Millisecond
	peer, ours := tcpPair(t)
	tr, err := newTCPTransport(ours)
	require.NoError(t, err)
	s := newSwitchTransport(tr, newShmExchange()) // never through
	defer s.close()
	_, err = peer.Write(ctlHeader(shmMarker))
	require.NoError(t, err)
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		var h [hdrLen]byte
		errc <- s.readHeader(&h)
	}()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, errSwitchWait)
		require.ErrorIs(t, err, errShmSwitch)
		require.GreaterOrEqual(t, time.Since(start), switchWait)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader waits at the marker for an exchange that never ends")
	}
}
