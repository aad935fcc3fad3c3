package soft

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// congestionControl reads TCP_CONGESTION from c's socket.
func congestionControl(t *testing.T, c *net.TCPConn) string {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var name string
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		name, serr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}))
	require.NoError(t, serr)
	return name
}

func TestSameHost(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 4791} }
	_, lo4, _ := net.ParseCIDR("127.0.0.0/8")
	_, lo6, _ := net.ParseCIDR("::1/128")
	withLo := []*net.IPNet{lo4, lo6}
	for _, c := range []struct {
		local, remote string
		lo            []*net.IPNet
		want          bool
	}{
		{"127.0.0.1", "127.0.0.1", withLo, true},
		{"127.0.2.1", "127.0.5.9", withLo, true}, // several loopback addresses stand for hosts on lo
		{"::1", "::1", withLo, true},
		{"10.1.2.3", "10.1.2.3", withLo, true}, // to one of our own interfaces' addresses
		{"10.1.2.3", "10.1.2.4", withLo, false},
		{"192.0.2.7", "198.51.100.1", withLo, false},
		{"fd00::1", "fd00::2", withLo, false},
		// A network namespace whose lo is down and whose veth carries
		// 127.199.0.x (internal/netnstest): another host, as far as this
		// goes; the same address at both ends is still this host.
		{"127.199.0.3", "127.199.0.2", nil, false},
		{"127.0.0.1", "127.0.0.1", nil, true},
	} {
		assert.Equal(t, c.want, sameHostOn(c.lo, tcp(c.local), tcp(c.remote)), "%s -> %s, lo %v", c.local, c.remote, c.lo)
	}
	assert.False(t, sameHostOn(withLo, &net.UnixAddr{}, tcp("127.0.0.1")))
	assert.False(t, sameHostOn(withLo, tcp("127.0.0.1"), &net.TCPAddr{}))
	// This host's own lo is up: a loopback pair of two addresses is on it.
	assert.True(t, sameHost(tcp("127.0.2.1"), tcp("127.0.5.9")))
}

func TestSameHostCCSetting(t *testing.T) {
	prev := setSameHostCC("")
	defer setSameHostCC(prev)
	for in, want := range map[string]string{"": "reno", " cubic ": "cubic", "System": "", "system": "", "reno": "reno"} {
		setSameHostCC(in)
		assert.Equal(t, want, *sameHostCC.Load(), "%q", in)
	}
}

// Both ends of a same-host connection run Reno once they carry soft's
// transport, whatever the system's default; with "system" they keep it.
func TestSameHostCongestionControl(t *testing.T) {
	raw, _ := tcpPair(t)
	system := congestionControl(t, raw)

	prev := setSameHostCC("")
	defer setSameHostCC(prev)
	active, passive := tcpPair(t)
	for _, c := range []*net.TCPConn{active, passive} {
		_, err := newTCPTransport(c)
		require.NoError(t, err)
		assert.Equal(t, "reno", congestionControl(t, c), "system default %q", system)
	}

	setSameHostCC("system")
	active, passive = tcpPair(t)
	for _, c := range []*net.TCPConn{active, passive} {
		_, err := newTCPTransport(c)
		require.NoError(t, err)
		assert.Equal(t, system, congestionControl(t, c))
	}
}
