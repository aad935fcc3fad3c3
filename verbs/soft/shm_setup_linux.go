//go:build linux

package soft

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/internal/hostaddr"
)

// Passing the rings: each side sends its ring's memfd and its eventfd over
// the connection's unix socket (SCM_RIGHTS), and checks what it receives
// before it maps anything: that the fds are what they claim to be, the
// ring's size within its own limit, and the peer of its own uid
// (samePrincipal). Whether a peer is offered shared memory at all
// (shmEligible) and the socket's name (shmSocketName, derived from the TCP
// connection's addresses, never read from the peer) are decided here too.

func sendSetup(uc *net.UnixConn, l *shmLocal) error {
	var b [shmSetupLen]byte
	marshalShmSetup(&b, uint32(len(l.ring)-shmHdrPage))
	_, _, err := uc.WriteMsgUnix(b[:], unix.UnixRights(l.ringFD, l.eventFD()), nil)
	return err
}

// recvFDs reads one message of exactly len(b) bytes carrying exactly nfd
// descriptors, within the connection's deadline. On error no descriptor
// stays open.
func recvFDs(uc *net.UnixConn, b []byte, nfd int) ([]int, error) {
	buf := make([]byte, len(b)+1)
	oob := make([]byte, unix.CmsgSpace(4*(nfd+4)))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if err == nil && (n != len(b) || len(fds) != nfd || flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0) {
		err = errShmSetup
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	copy(b, buf)
	return fds, nil
}

// isEventfd reports whether fd is an eventfd.
func isEventfd(fd int) bool {
	s, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && s == "anon_inode:[eventfd]"
}

// sendTokenSetup sends the token of a version 3 offer and our ring setup
// in one message.
func sendTokenSetup(uc *net.UnixConn, token *[16]byte, l *shmLocal) error {
	var b [16 + shmSetupLen]byte
	copy(b[:], token[:])
	marshalShmSetup((*[shmSetupLen]byte)(b[16:]), uint32(len(l.ring)-shmHdrPage))
	_, _, err := uc.WriteMsgUnix(b[:], unix.UnixRights(l.ringFD, l.eventFD()), nil)
	return err
}

// recvSetup receives the peer's ring setup; limit is the largest ring data
// size we map.
func recvSetup(uc *net.UnixConn, limit int) (*shmPeer, error) {
	var b [shmSetupLen]byte
	fds, err := recvFDs(uc, b[:], 2)
	if err != nil {
		return nil, err
	}
	return peerSetup(b[:], fds, limit)
}

// peerSetup checks and maps the ring setup b that came with fds (a ring
// memfd, an eventfd); limit is the largest ring data size we map. The
// memfd is closed either way, the eventfd kept only on success.
func peerSetup(b []byte, fds []int, limit int) (*shmPeer, error) {
	p := &shmPeer{ev: fds[1]}
	defer unix.Close(fds[0])
	size, err := parseShmSetup(b, uint32(min(limit, shmRingMax)))
	if err != nil || !isEventfd(p.ev) {
		p.free()
		return nil, errShmSetup
	}
	if p.ring, err = mapRing(fds[0], shmHdrPage+int(size)); err != nil {
		p.free()
		return nil, errShmSetup
	}
	if au64(p.ring, offMagic).Load() != shmMagic {
		p.free()
		return nil, errShmSetup
	}
	return p, nil
}

// shmEligible: shared memory is on and the address is this host's.
func shmEligible(ip net.IP) bool {
	return shmOn.Load() && bootID() != "" && ip != nil && hostaddr.Local(ip)
}

// shmSocketName is the abstract unix socket on which the active side of
// the TCP connection active->passive waits for the passive side. Both
// derive it from the connection's addresses as their kernels report them
// (the 4-tuple is unique on the host while the connection lives), so that
// no name is ever taken from a peer's message, and only names of this
// form can ever be dialled.
func shmSocketName(active, passive *net.TCPAddr) string {
	norm := func(a *net.TCPAddr) string {
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()).String()
	}
	return "@rdma-soft/" + norm(active) + "/" + norm(passive)
}

// shmUID is the uid a peer must run as to share memory with us: our
// effective uid (tests change it to play another user).
var shmUID atomic.Uint32

func init() { shmUID.Store(uint32(os.Geteuid())) }

// samePrincipal reports whether the process at the other end of uc runs
// as our effective uid (SO_PEERCRED: the connecting process's credentials
// for a listener, the listening process's for a dialler).
func samePrincipal(uc *net.UnixConn) bool {
	cred := peerCred(uc)
	return cred != nil && cred.Uid == shmUID.Load()
}

// peerPID is the pid of the process at the other end of uc (SO_PEERCRED),
// 0 if unknown (or not in our pid namespace).
func peerPID(uc *net.UnixConn) int32 {
	if cred := peerCred(uc); cred != nil {
		return cred.Pid
	}
	return 0
}

func peerCred(uc *net.UnixConn) *unix.Ucred {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return nil
	}
	return cred
}
