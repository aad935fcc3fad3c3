//go:build !linux

package soft

import "runtime"

// schedYield gives up the processor where the thread's yield is not at
// hand (Linux's is in shm_transport_linux.go): the goroutine's P only.
func schedYield() { runtime.Gosched() }
