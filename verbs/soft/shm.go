package soft

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The same-host path. When both ends of a connection run on one host (same
// boot ID, and able to pass file descriptors to each other over a unix
// socket), the handshake may pick shared memory instead of TCP to carry the
// frames: each direction is a ring in a sealed memfd mapped by both
// processes, with an eventfd per direction for wake-ups, parked on Go's
// runtime poller. Payloads in registered memory are not copied into the
// ring: the ring carries a reference (the memory's memfd is passed once,
// read-only) and the responder copies straight from the requester's
// registered memory into its own, after its usual rkey, bounds and access
// checks, so an RDMA WRITE or SEND is one copy. The handshake's TCP
// connection stays open as the liveness channel: when the peer process dies
// the kernel closes it and the connection fails at once. See shm_linux.go;
// elsewhere only TCP is used.

// transportShm is bit 1 of the handshake's transport set.
const transportShm = 1 << 1

var (
	shmOn   atomic.Bool  // offer and accept shared memory
	shmSpin atomic.Int64 // ns a reader spins on an empty ring before sleeping
	shmUsed atomic.Int64 // connections set up over shared memory (tests)
)

// defaultShmSpin is the default bounded spin of a reader on an empty ring:
// none. A reader that spins holds a CPU for up to the spin time per wait.
// It pays off when the peer answers within it and has a CPU of its own to
// answer on (a round trip then costs a few microseconds instead of two
// eventfd wake-ups); on a machine with few CPUs and other work, spinning
// takes CPU time the peer needs and makes round trips slower (measured on a
// busy 2-CPU host: 5 us of spin about broke even, 20-50 us doubled the
// median round trip), hence off by default.
const defaultShmSpin = 0

func init() {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("RDMA_SOFT_SHM")))
	shmOn.Store(!(v == "0" || v == "off" || v == "false" || v == "no"))
	shmSpin.Store(int64(defaultShmSpin))
	if s := os.Getenv("RDMA_SOFT_SHM_SPIN"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			shmSpin.Store(int64(d))
		} else if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			shmSpin.Store(int64(n) * int64(time.Microsecond))
		}
	}
}

// SetSharedMemory turns the same-host shared-memory path on or off for
// connections set up afterwards (both ends must allow it; default on,
// RDMA_SOFT_SHM=0 turns it off). It returns the previous setting. Off, or
// between hosts, or on platforms other than Linux, frames travel on TCP.
func SetSharedMemory(on bool) bool { return shmOn.Swap(on) }

// SetSharedMemorySpin sets how long a reader of a shared-memory connection
// busy-waits on an empty ring before it sleeps on its eventfd (default 0:
// off; RDMA_SOFT_SHM_SPIN, e.g. "5us", sets it too). Spinning costs up to
// that much CPU time per wait and saves the wake-up of a sleeping reader
// (a system call on each side and a scheduler hand-off) when data arrives
// within it. It returns the previous value.
func SetSharedMemorySpin(d time.Duration) time.Duration {
	return time.Duration(shmSpin.Swap(int64(max(d, 0))))
}
