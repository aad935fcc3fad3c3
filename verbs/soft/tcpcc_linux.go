package soft

import (
	"net"

	"golang.org/x/sys/unix"
)

// setCongestionControl sets TCP_CONGESTION on c's socket.
func setCongestionControl(c *net.TCPConn, name string) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	return serr
}
