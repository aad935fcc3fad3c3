//go:build !linux

package soft

import (
	"errors"
	"syscall"
)

var errNoCC = errors.New("soft: no per-socket congestion control on this platform")

// Elsewhere than on Linux a socket keeps the system's congestion control.
func setCongestionControl(syscall.RawConn, string) error { return errNoCC }
