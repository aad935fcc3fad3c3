package streamconn

import (
	"fmt"
	"net"
	"os"

	"github.com/rdmanet/rdma/internal/hostaddr"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// shmReason says, as exactly as this side can tell, why a soft
// connection between laddr and raddr, on qp, runs on TCP rather than
// shared memory: this side's own setting (off), a peer on another host, a peer
// process of another uid (its end of the TCP connection, in
// /proc/net/tcp*, is owned by it), which shared memory is never offered
// to, a move still to come (it starts on TCP and moves once it talks);
// what is left is the peer's decision. Only debug logging calls this.
func shmReason(laddr, raddr *net.TCPAddr, qp verbs.QP) string {
	if laddr == nil || raddr == nil {
		return "unknown"
	}
	if !soft.SharedMemoryEnabled() {
		return "this side has shared memory off (RDMA_SOFT_SHM=0 or soft.SetSharedMemory(false))"
	}
	if !hostaddr.Local(raddr.IP) {
		return "the peer " + raddr.IP.String() + " is not an address of this host"
	}
	if uid, ok := hostaddr.SocketUID(raddr, laddr); ok && uid != os.Geteuid() {
		return fmt.Sprintf("the peer runs as uid %d and this process as uid %d: shared memory is only offered between processes of one uid", uid, os.Geteuid())
	}
	if qp != nil && soft.SwitchPending(qp) {
		return "not yet: the connection starts on TCP and moves to shared memory once it talks"
	}
	return "the peer did not take shared memory: its own setting is off (RDMA_SOFT_SHM=0), " +
		"it is of an older version or asks for a larger ring, or its ring could not be set up"
}
