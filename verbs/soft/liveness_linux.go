package soft

import (
	"net"

	"golang.org/x/sys/unix"
)

// answering: the kernel has no retransmission or probe of ours outstanding
// unanswered (liveness.go).
func (t *tcpTransport) answering() bool {
	if silencedEnd(t.c) {
		return false
	}
	var info *unix.TCPInfo
	var err error
	if cerr := t.rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); cerr != nil || err != nil {
		return false
	}
	return info.Retransmits == 0 && info.Probes == 0
}

// answering: the peer's process is alive (liveness.go).
func (t *shmTransport) answering() bool {
	return !t.gone.Load() && !t.closed.Load() && !silencedEnd(t.tcp)
}

// answering: a connection that moves to shared memory is alive while its
// TCP connection is (it stays open beside the rings as their liveness
// connection), and its rings' peer, once they carry the frames.
func (s *switchTransport) answering() bool {
	if st := s.ok.Load(); st != nil && !st.answering() {
		return false
	}
	return s.tcp.answering()
}

// shmLiveness is the TCP connection that watches tr's peer, for silence.
func shmLiveness(tr transport) net.Conn {
	switch t := tr.(type) {
	case *shmTransport:
		return t.tcp
	case *switchTransport:
		return t.tcp.c
	}
	return nil
}
