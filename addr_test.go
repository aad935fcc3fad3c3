package rdma

import (
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveAddr(t *testing.T) {
	for _, network := range []string{"rdma", "rdma4", "tcp", "tcp4"} {
		a, err := ResolveAddr(network, "127.0.0.2:4791")
		require.NoError(t, err, network)
		assert.Equal(t, "rdma", a.Network())
		assert.Equal(t, "127.0.0.2:4791", a.String())
		assert.True(t, a.IP.Equal(net.ParseIP("127.0.0.2")))
		assert.Equal(t, 4791, a.Port)
		assert.Equal(t, "127.0.0.2:4791", a.AddrPort().String())
	}
	a, err := ResolveAddr("rdma6", "[::1]:80")
	require.NoError(t, err)
	assert.Equal(t, "[::1]:80", a.String())
	a, err = ResolveAddr("rdma", "[fe80::1%lo]:80")
	require.NoError(t, err)
	assert.Equal(t, "lo", a.Zone)
	assert.Equal(t, "[fe80::1%lo]:80", a.String())

	_, err = ResolveAddr("rdma4", "[::1]:80")
	assert.Error(t, err)
	_, err = ResolveAddr("rdma", "no-port")
	assert.Error(t, err)
	for _, bad := range []string{"udp", "ip", "unix", "", "RDMA"} {
		_, err = ResolveAddr(bad, "127.0.0.1:1")
		var une net.UnknownNetworkError
		assert.True(t, errors.As(err, &une), "%q: %v", bad, err)
	}
	var nilAddr *Addr
	assert.Equal(t, "<nil>", nilAddr.String())
}

func TestConfigDefaults(t *testing.T) {
	var nilCfg *Config
	d := nilCfg.withDefaults()
	assert.Equal(t, defaultRingSize, d.RingSize)
	assert.Equal(t, d.RingSize, d.SendBufferSize)
	assert.Equal(t, defaultSendDepth, d.SendDepth)
	assert.Equal(t, defaultRecvDepth, d.RecvDepth)
	assert.Equal(t, defaultInline, d.InlineThreshold)
	assert.Equal(t, defaultKeepAlive, d.KeepAlive)

	c := (&Config{RingSize: 5000, SendBufferSize: 1, SendDepth: 1 << 20, RecvDepth: 3, InlineThreshold: -1}).withDefaults()
	assert.Equal(t, 8192, c.RingSize)
	assert.Equal(t, minRingSize, c.SendBufferSize)
	assert.Equal(t, maxSendDepth, c.SendDepth)
	assert.Equal(t, minDepth, c.RecvDepth)
	assert.Equal(t, 0, c.InlineThreshold)
	assert.Equal(t, maxRingSize, (&Config{RingSize: 1 << 40}).withDefaults().RingSize)
}
