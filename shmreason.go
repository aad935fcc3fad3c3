package rdma

import (
	"fmt"
	"os"

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
	if uid, ok := hostaddr.SocketUID(raddr.tcpAddr(), laddr.tcpAddr()); ok && uid != os.Geteuid() {
		return fmt.Sprintf("the peer runs as uid %d and this process as uid %d: shared memory is only offered between processes of one uid", uid, os.Geteuid())
	}
	return "the handshake chose TCP: shared memory switched off on either side (RDMA_SOFT_SHM=0, soft.SetSharedMemory), " +
		"a peer of an older version or a larger ring, or a switch to shared memory still to come"
}
