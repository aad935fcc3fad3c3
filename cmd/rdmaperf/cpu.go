package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user plus system) this process has used so
// far, or 0 where the system does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
