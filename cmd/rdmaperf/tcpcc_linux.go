package main

import (
	"fmt"
	"os"
	"strings"
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

// baselineCC is the congestion control the TCP baseline's client sends
// with: -tcp-cc, else the system's default. Reported beside the baseline,
// since on a host whose default paces loopback senders (BBR) it moves
// TCP's figures by up to 2x, and soft's same-host connections use Reno.
func baselineCC(flag string) string {
	if flag != "" {
		return flag
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
