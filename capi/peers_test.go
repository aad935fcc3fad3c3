package capi

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeConn is one end of a net.Pipe whose other end the test closes.
func pipeConn(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

// The peer table's rules, without a transport: indexes in order, room
// reserved against MaxPeers, an index taken again only once its peer is
// gone or disconnected, and nothing after close.
func TestPeerTable(t *testing.T) {
	t.Run("IndexesAndMaxPeers", func(t *testing.T) {
		tab := newPeerTable(64)
		for i := range MaxPeers - 1 {
			require.NoError(t, tab.reserve("connect"))
			idx, err := tab.add("connect", pipeConn(t))
			require.NoError(t, err)
			require.Equal(t, i, idx)
		}
		require.NoError(t, tab.reserve("connect")) // the last room, under way
		assert.ErrorIs(t, tab.reserve("connect"), ErrTooManyPeers, "a reserved connection counts against MaxPeers")
		tab.unreserve()
		require.NoError(t, tab.reserve("connect"), "a failed connection gives its room back")
	})
	t.Run("Claim", func(t *testing.T) {
		tab := newPeerTable(64)
		require.NoError(t, tab.reserve("connect"))
		_, err := tab.add("connect", pipeConn(t))
		require.NoError(t, err)
		assert.ErrorIs(t, tab.claim("reconnect", 0), ErrPeerConnected, "a live peer")
		assert.ErrorIs(t, tab.claim("reconnect", 1), ErrNoSuchPeer)
		p, err := tab.live("send to", 0)
		require.NoError(t, err)
		p.lose(errors.New("reset"))
		_, err = tab.live("send to", 0)
		assert.ErrorIs(t, err, ErrPeerGone)
		require.NoError(t, tab.claim("reconnect", 0))
		assert.ErrorIs(t, tab.claim("accept at", 0), ErrPeerConnected, "a claimed index")
		require.NoError(t, tab.release(0, pipeConn(t)))
		q, err := tab.live("send to", 0)
		require.NoError(t, err)
		assert.NotSame(t, p, q, "the new connection is peer 0")
		require.True(t, q.disconnect())
		_, err = tab.live("send to", 0)
		assert.ErrorIs(t, err, ErrPeerDisconnected)
		require.NoError(t, tab.claim("reconnect", 0))
		require.NoError(t, tab.release(0, nil), "a failed reconnect leaves the index claimable")
		require.NoError(t, tab.claim("reconnect", 0))
	})
	t.Run("Close", func(t *testing.T) {
		tab := newPeerTable(64)
		require.NoError(t, tab.reserve("connect"))
		_, err := tab.add("connect", pipeConn(t))
		require.NoError(t, err)
		require.NoError(t, tab.reserve("connect"))
		peers, first := tab.close()
		require.True(t, first)
		assert.Len(t, peers, 1)
		_, again := tab.close()
		assert.False(t, again)
		// A connection that completes after close is closed, not added.
		late := pipeConn(t)
		_, err = tab.add("connect", late)
		assert.ErrorIs(t, err, ErrClosed)
		late.SetWriteDeadline(time.Now()) // an open pipe fails at once too, not with ErrClosedPipe
		_, err = late.Write([]byte{1})
		assert.ErrorIs(t, err, io.ErrClosedPipe, "the late connection was closed")
		assert.ErrorIs(t, tab.reserve("connect"), ErrClosed)
		_, err = tab.livePeers("broadcast", nil)
		assert.ErrorIs(t, err, ErrClosed)
		_, err = tab.live("send to", 0)
		assert.ErrorIs(t, err, ErrClosed)
	})
}
