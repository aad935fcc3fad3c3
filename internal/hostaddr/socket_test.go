package hostaddr

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcAddrIs(t *testing.T) {
	a := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	assert.True(t, procAddrIs("0100007F:1F90", a))
	assert.False(t, procAddrIs("0100007F:1F91", a), "another port")
	assert.False(t, procAddrIs("0200007F:1F90", a), "another address")
	// An IPv4 peer of an IPv6 socket: ::ffff:127.0.0.1.
	assert.True(t, procAddrIs("0000000000000000FFFF00000100007F:1F90", a))
	assert.True(t, procAddrIs("00000000000000000000000001000000:0050", &net.TCPAddr{IP: net.IPv6loopback, Port: 80}))
	for _, bad := range []string{"", "0100007F", "0100007F:", "XX00007F:1F90", "01007F:1F90"} {
		assert.False(t, procAddrIs(bad, a), "%q", bad)
	}
}

// SocketUID finds a loopback connection of this process, owned by its uid.
func TestSocketUID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/net/tcp is Linux's")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()

	local, remote := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	uid, ok := SocketUID(local, remote)
	require.True(t, ok)
	assert.Equal(t, os.Geteuid(), uid)
	_, ok = SocketUID(&net.TCPAddr{IP: local.IP, Port: 1}, remote)
	assert.False(t, ok, "no such socket")
}
