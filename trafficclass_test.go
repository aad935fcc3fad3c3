package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Config.TrafficClass reaches the wire on both ends: read back from the
// connection (soft: the TCP socket's IP_TOS), on each carrier; a
// listener's SetTrafficClass applies to what it accepts afterwards.
func TestTrafficClass(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		cfg := &Config{Provider: ProviderSoft, TrafficClass: 0x88}
		c, s := pair(t, cfg)
		for _, conn := range []*Conn{c, s} {
			tc, err := conn.TrafficClass()
			require.NoError(t, err)
			assert.Equal(t, 0x88, tc)
		}

		ln := listen(t, softConfig())
		c0, s0 := dial(t, ln, nil), accept(t, ln)
		tc, err := s0.TrafficClass()
		require.NoError(t, err)
		assert.Equal(t, 0, tc, "nothing set")
		require.NoError(t, ln.SetTrafficClass(0x20))
		require.Error(t, ln.SetTrafficClass(256))
		c1 := dial(t, ln, &Config{Provider: ProviderSoft, TrafficClass: 0x48})
		s1 := accept(t, ln)
		tc, err = s1.TrafficClass()
		require.NoError(t, err)
		assert.Equal(t, 0x20, tc, "the listener's class")
		tc, err = c1.TrafficClass()
		require.NoError(t, err)
		assert.Equal(t, 0x48, tc, "the dialer's class")
		for _, x := range []*Conn{c0, s0, c1, s1} {
			x.Close()
		}
		_, err = c1.TrafficClass()
		require.Error(t, err)
	})
	assert.Equal(t, 255, (&Config{TrafficClass: 1000}).withDefaults().TrafficClass)
	assert.Equal(t, 0, (&Config{TrafficClass: -3}).withDefaults().TrafficClass)
}

func accept(t *testing.T, ln *Listener) *Conn {
	t.Helper()
	c, err := ln.Accept()
	require.NoError(t, err)
	return c.(*Conn)
}

// The rsocket wire takes Config.TrafficClass on both ends as rdma.Conn
// does: the dial (which passed 0 before) and the listener.
func TestTrafficClassRsocket(t *testing.T) {
	cfg := rsConfig()
	cfg.TrafficClass = 0x88
	c, s := rsPair(t, cfg)
	for _, conn := range []*RsocketConn{c, s} {
		tc, err := conn.TrafficClass()
		require.NoError(t, err)
		assert.Equal(t, 0x88, tc)
	}
	require.NoError(t, c.Close())
	_, err := c.TrafficClass()
	require.Error(t, err)
}
