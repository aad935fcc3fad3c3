package soft

import (
	"net"
	"sync/atomic"
)

// SharedMemoryEnabled reports this process's own setting for the
// shared-memory path (SetSharedMemory, RDMA_SOFT_SHM): with it off, this
// side neither offers nor accepts shared memory.
func SharedMemoryEnabled() bool { return shmOn.Load() }

// CarrierEvent is a connection's move between carriers: to "shm" once
// both of its directions run on shared memory, or staying on "tcp" with
// Err saying why its move failed.
type CarrierEvent struct {
	Local, Remote net.Addr // the addresses of the TCP connection underneath
	Carrier       string   // "shm" or "tcp"
	Err           error
}

var carrierHook atomic.Pointer[func(CarrierEvent)]

// SetCarrierHook has f called at each CarrierEvent (nil: none), on the
// goroutine that completed the move; f must not block. Package rdma logs
// them (RDMA_DEBUG_SUBSYS=shm).
func SetCarrierHook(f func(CarrierEvent)) {
	if f == nil {
		carrierHook.Store(nil)
		return
	}
	carrierHook.Store(&f)
}

// carrierChanged reports a move of the connection over c.
func carrierChanged(c *net.TCPConn, carrier string, err error) {
	f := carrierHook.Load()
	if f == nil || c == nil {
		return
	}
	(*f)(CarrierEvent{Local: c.LocalAddr(), Remote: c.RemoteAddr(), Carrier: carrier, Err: err})
}
