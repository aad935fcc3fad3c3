package hostaddr

import (
	"bufio"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"
)

// SocketUID finds the TCP socket of this host whose local address is local
// and remote address remote, in /proc/net/tcp and tcp6, and returns its
// owner's uid; false where there is no such socket (or no /proc).
func SocketUID(local, remote *net.TCPAddr) (int, bool) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if uid, ok := scanSockets(f, local, remote); ok {
			return uid, true
		}
	}
	return 0, false
}

func scanSockets(file string, local, remote *net.TCPAddr) (int, bool) {
	fh, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || !procAddrIs(f[1], local) || !procAddrIs(f[2], remote) {
			continue
		}
		uid, err := strconv.Atoi(f[7])
		return uid, err == nil
	}
	return 0, false
}

// procAddrIs reports whether s, an address as /proc/net/tcp* writes it
// (hex IP in 32-bit words of host order, ':', hex port), is a.
func procAddrIs(s string, a *net.TCPAddr) bool {
	ip, port, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil || int(p) != a.Port {
		return false
	}
	b, err := hex.DecodeString(ip)
	if err != nil || len(b)%4 != 0 {
		return false
	}
	for i := 0; i < len(b); i += 4 { // each word in little-endian order (x86, arm64)
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b).Equal(a.IP)
}
