//go:build !linux

package main

import (
	"fmt"
	"syscall"
)

// congestionControl: only Linux sets a socket's congestion control.
func congestionControl(name string) func(network, address string, c syscall.RawConn) error {
	if name == "" {
		return nil
	}
	return func(string, string, syscall.RawConn) error {
		return fmt.Errorf("-tcp-cc %s: not supported on this platform", name)
	}
}

// baselineCC: elsewhere only what -tcp-cc asked for is known.
func baselineCC(flag string) string { return flag }
