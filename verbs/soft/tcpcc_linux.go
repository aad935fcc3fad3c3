package soft

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestionControl sets TCP_CONGESTION on rc's socket.
func setCongestionControl(rc syscall.RawConn, name string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	return serr
}
