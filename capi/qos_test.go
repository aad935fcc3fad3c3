package capi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs/soft"
)

// The context's traffic class reaches both ends of the connections made
// after it was set, read back from the wire (soft: the TCP socket).
func TestTrafficClass(t *testing.T) {
	prev := soft.SetSharedMemory(false)
	defer soft.SetSharedMemory(prev)
	srv, err := initWith(rdmaTransport, "127.0.0.1", 0, 64, true)
	require.NoError(t, err)
	defer srv.Close()
	port := portOf(t, srv.Addr())
	cl, err := initWith(rdmaTransport, "127.0.0.2", 0, 64, false)
	require.NoError(t, err)
	defer cl.Close()

	// Before: the default.
	_, err = cl.ConnectPeer("127.0.0.1", port)
	require.NoError(t, err)
	_, err = srv.AcceptPeer()
	require.NoError(t, err)
	for _, c := range []*Context{cl, srv} {
		tc, err := c.TrafficClass(0)
		require.NoError(t, err)
		assert.Equal(t, 0, tc)
	}

	require.NoError(t, srv.SetTrafficClass(0x28))
	require.NoError(t, cl.SetTrafficClass(0xb8))
	require.ErrorIs(t, cl.SetTrafficClass(256), ErrInvalidArgument)
	tc, err := cl.TrafficClass(-1)
	require.NoError(t, err)
	assert.Equal(t, 0xb8, tc)
	idx, err := cl.ConnectPeer("127.0.0.1", port)
	require.NoError(t, err)
	sidx, err := srv.AcceptPeer()
	require.NoError(t, err)
	tc, err = cl.TrafficClass(idx)
	require.NoError(t, err)
	assert.Equal(t, 0xb8, tc, "the client's socket")
	tc, err = srv.TrafficClass(sidx)
	require.NoError(t, err)
	assert.Equal(t, 0x28, tc, "the server's socket")
	tc, err = cl.TrafficClass(0)
	require.NoError(t, err)
	assert.Equal(t, 0, tc, "a connection made before keeps its class")
	_, err = cl.TrafficClass(7)
	require.ErrorIs(t, err, ErrNoSuchPeer)
}

func TestTrafficClassTCP(t *testing.T) {
	s := newStar(t, tcpTransport, 1, 64)
	require.ErrorIs(t, s.server.SetTrafficClass(8), ErrNotSupported)
	_, err := s.server.TrafficClass(0)
	require.ErrorIs(t, err, ErrNotSupported)
}
