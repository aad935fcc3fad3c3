package soft

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// The type of service (SetTOS) of a soft connection is the IP_TOS, or on
// IPv6 the IPV6_TCLASS, of the TCP socket that carries it: set before the
// dial's SYN on the active side, on the accepted socket before the REP on
// the passive side, and read back from the socket by QP.Query. (On the
// shared-memory path the frames bypass TCP; the socket, kept for liveness,
// still carries the setting.)

// tosOption is the socket option level and name for the type of service of
// a socket of network ("tcp4", "tcp6") or with local address ip.
func tosOption(v6 bool) (level, name int) {
	if v6 {
		return unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	return unix.IPPROTO_IP, unix.IP_TOS
}

func isV6(c *net.TCPConn) bool {
	a, ok := c.LocalAddr().(*net.TCPAddr)
	return ok && a.IP.To4() == nil
}

// setTOS sets the type of service of the socket behind rc.
func setTOS(rc syscall.RawConn, v6 bool, tos int) error {
	level, name := tosOption(v6)
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, name, tos)
	}); err != nil {
		return err
	}
	return serr
}

// setConnTOS sets the type of service of c.
func setConnTOS(c *net.TCPConn, tos int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return setTOS(rc, isV6(c), tos)
}

// connTOS reads the type of service of c back from the socket.
func connTOS(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	level, name := tosOption(isV6(c))
	var tos int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		tos, serr = unix.GetsockoptInt(int(fd), level, name)
	}); err != nil {
		return 0, err
	}
	return tos, serr
}
