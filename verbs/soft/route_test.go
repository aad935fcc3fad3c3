package soft

import (
	"net"
	"testing"

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
