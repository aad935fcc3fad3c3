package main

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// congestionControl is a Dialer or ListenConfig Control that gives the
// TCP baseline's sockets the algorithm name (-tcp-cc; nil for ""), so that
// the baseline can run as soft's same-host connections do.
func congestionControl(name string) func(network, address string, c syscall.RawConn) error {
	if name == "" {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("-tcp-cc %s: %w", name, serr)
		}
		return nil
	}
}
