package soft

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// routeSource answers as a connected UDP socket of net's does.
func TestRouteSourceMatchesNet(t *testing.T) {
	dsts := []*net.TCPAddr{
		{IP: net.IPv4(127, 0, 0, 1), Port: 9},
		{IP: net.IPv4(127, 0, 0, 72), Port: 65535},
		{IP: net.IPv4zero, Port: 1},
	}
	if c, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
		c.Close()
		dsts = append(dsts, &net.TCPAddr{IP: net.IPv6loopback, Port: 9})
	}
	for _, dst := range dsts {
		u, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: dst.IP, Port: dst.Port})
		require.NoError(t, err, dst)
		want := u.LocalAddr().(*net.UDPAddr).IP
		u.Close()
		got, err := routeSource(dst)
		require.NoError(t, err, dst)
		require.True(t, want.Equal(got), "%v: routeSource %v, net %v", dst, got, want)
	}
	// No route: an error, as net's.
	_, err := routeSource(&net.TCPAddr{IP: net.ParseIP("ff02::1"), Port: 9})
	require.Error(t, err)
}

// countRouteLookups counts the kernel route lookups from now to the end
// of the test, with an empty cache at both ends.
func countRouteLookups(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	prev := lookupRoute
	lookupRoute = func(dst *net.TCPAddr) (net.IP, error) {
		n.Add(1)
		return prev(dst)
	}
	reset := func() {
		routes.mu.Lock()
		routes.m = nil
		routes.mu.Unlock()
	}
	reset()
	t.Cleanup(func() {
		lookupRoute = prev
		reset()
	})
	return &n
}

// A destination's route is looked up once per routeCacheTTL; a dial
// that fails forgets it.
func TestRouteCache(t *testing.T) {
	n := countRouteLookups(t)
	dst := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 73), Port: 9}
	now := time.Now()
	src, err := routes.source(dst, now)
	require.NoError(t, err)
	require.Equal(t, int32(1), n.Load())
	again, err := routes.source(dst, now.Add(routeCacheTTL-time.Millisecond))
	require.NoError(t, err)
	require.True(t, src.Equal(again))
	require.Equal(t, int32(1), n.Load(), "asked again within the TTL")
	again[0] = 0 // the caller's copy, not the cache's
	_, err = routes.source(&net.TCPAddr{IP: dst.IP, Port: 10}, now)
	require.NoError(t, err)
	require.Equal(t, int32(2), n.Load(), "another destination")
	_, err = routes.source(dst, now.Add(routeCacheTTL))
	require.NoError(t, err)
	require.Equal(t, int32(3), n.Load(), "the answer expired")
	routes.forget(dst)
	again, err = routes.source(dst, now.Add(routeCacheTTL))
	require.NoError(t, err)
	require.True(t, src.Equal(again))
	require.Equal(t, int32(4), n.Load(), "forgotten")

	// Bounded: past routeCacheMax destinations it starts over.
	for p := 1; p <= routeCacheMax+1; p++ {
		_, err := routes.source(&net.TCPAddr{IP: dst.IP, Port: p}, now)
		require.NoError(t, err)
	}
	routes.mu.Lock()
	size := len(routes.m)
	routes.mu.Unlock()
	require.LessOrEqual(t, size, routeCacheMax)
	// No route: an error, and nothing remembered.
	_, err = routes.source(&net.TCPAddr{IP: net.ParseIP("ff02::1"), Port: 9}, now)
	require.Error(t, err)
}
