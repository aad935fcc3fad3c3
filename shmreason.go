package rdma

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/rdmanet/rdma/internal/hostaddr"
)

// shmReason says, as well as this side can tell, why a soft connection
// between laddr and raddr runs on TCP rather than shared memory. soft
// decides in its handshake and keeps the reason to itself; what is
// visible from here: a peer on another host, and a peer process of
// another uid (its end of the TCP connection, in /proc/net/tcp*, is
// owned by it), which shared memory is never offered to. Only debug
// logging calls this.
func shmReason(laddr, raddr *Addr) string {
	if laddr == nil || raddr == nil {
		return "unknown"
	}
	if !hostaddr.Local(raddr.IP) {
		return "the peer " + raddr.IP.String() + " is not an address of this host"
	}
	if uid, ok := socketUID(raddr, laddr); ok && uid != os.Geteuid() {
		return fmt.Sprintf("the peer runs as uid %d and this process as uid %d: shared memory is only offered between processes of one uid", uid, os.Geteuid())
	}
	return "the handshake chose TCP: shared memory switched off on either side (RDMA_SOFT_SHM=0, soft.SetSharedMemory), " +
		"a peer of an older version or a larger ring, or a switch to shared memory still to come"
}

// socketUID finds the TCP socket whose local address is local and
// remote address remote in /proc/net/tcp and tcp6, and returns its owner.
func socketUID(local, remote *Addr) (int, bool) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if uid, ok := scanSockets(f, local, remote); ok {
			return uid, true
		}
	}
	return 0, false
}

func scanSockets(file string, local, remote *Addr) (int, bool) {
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
func procAddrIs(s string, a *Addr) bool {
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
