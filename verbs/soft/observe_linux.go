//go:build linux

package soft

import (
	"time"

	"github.com/rdmanet/rdma/verbs"
	"golang.org/x/sys/unix"
)

// TCPInfo returns the kernel's smoothed round-trip time and total
// retransmitted segments for the TCP socket under q, a connected QP of
// this provider (what ss -i shows); ok is false when q has none (not
// this provider's, not connected).
func TCPInfo(q verbs.QP) (rtt time.Duration, retransmits uint64, ok bool) {
	sq, isSoft := q.(*qp)
	if !isSoft {
		return 0, 0, false
	}
	sq.mu.Lock()
	sock := sq.sock
	sq.mu.Unlock()
	if sock == nil {
		return 0, 0, false
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var info *unix.TCPInfo
	var serr error
	if err = rc.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || serr != nil {
		return 0, 0, false
	}
	return time.Duration(info.Rtt) * time.Microsecond, uint64(info.Total_retrans), true
}

// SwitchPending reports whether q, a connected QP of this provider on
// TCP, is set to move to shared memory later (its handshake chose the
// switching transport and the move has not completed).
func SwitchPending(q verbs.QP) bool {
	sq, isSoft := q.(*qp)
	if !isSoft {
		return false
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	s, ok := sq.tr.(*switchTransport)
	return ok && s.carrier() != "shm"
}

// noteCarrier reports the connection's move once both directions are on
// shared memory (called where each direction's switch completes), or its
// exchange's failure, which keeps it on TCP.
func (s *switchTransport) noteCarrier(err error) {
	switch {
	case err != nil:
		carrierChanged(s.tcp.c, "tcp", err)
	case s.carrier() == "shm" && s.noted.CompareAndSwap(false, true):
		carrierChanged(s.tcp.c, "shm", nil)
	}
}
