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
	for _, c := range []struct {
		local, remote string
		want          bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.2.1", "127.0.5.9", true}, // several loopback addresses stand for hosts, still one kernel
		{"::1", "::1", true},
		{"10.1.2.3", "10.1.2.3", true}, // to one of our own interfaces' addresses
		{"10.1.2.3", "10.1.2.4", false},
		{"192.0.2.7", "198.51.100.1", false},
		{"fd00::1", "fd00::2", false},
	} {
		assert.Equal(t, c.want, sameHost(tcp(c.local), tcp(c.remote)), "%s -> %s", c.local, c.remote)
	}
	assert.False(t, sameHost(&net.UnixAddr{}, tcp("127.0.0.1")))
	assert.False(t, sameHost(tcp("127.0.0.1"), &net.TCPAddr{}))
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
