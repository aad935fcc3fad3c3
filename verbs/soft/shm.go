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
//
// Isolation differs from a NIC's in one respect: a memory block (from
// verbs.AllocMemory) that a payload is sent from becomes readable as a whole
// by the peer process, not only the registered range being sent. The peer
// is a process on the same host that this one chose to connect to; where
// that is not acceptable, SetSharedMemory(false) or RDMA_SOFT_SHM=0 keeps
// every byte on TCP.

// transportShm is bit 1 of the handshake's transport set.
const transportShm = 1 << 1

var (
	shmOn   atomic.Bool  // offer and accept shared memory
	shmSpin atomic.Int64 // ns a reader spins on an empty ring before sleeping
	shmUsed atomic.Int64 // connections set up over shared memory (tests)
)

// defaultShmSpin is the default bounded spin of a reader on an empty ring.
// The spin yields the CPU (sched_yield) every few dozen checks, so that on
// a busy host the peer, or anything else runnable, gets to run meanwhile;
// when data comes within the spin, the reader sees it without the two
// system calls and the scheduler wake-up of an eventfd round. It costs up to
// this much CPU time per wait that the spin does not catch (a waiting
// reader otherwise uses none). Measured with rdmaperf -fork on a busy 2-CPU
// host (load 10): against no spin, the 64 B round trip's median halved, at
// about the CPU per process of TCP; in a 64 KiB stream the readers slept
// on 10% of their waits with a 20 us spin, 2% with 50 us, and throughput
// rose accordingly; a pure busy loop (no yield) made round trips slower.
const defaultShmSpin = 50 * time.Microsecond

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
// polls an empty ring (yielding the CPU between polls) before it sleeps on
// its eventfd: default 50 us, RDMA_SOFT_SHM_SPIN ("5us", "0") sets it at
// start-up, 0 never spins. Spinning costs up to that much CPU time per wait
// and saves the wake-up of a sleeping reader (a system call on each side
// and a scheduler wake-up) when data arrives within it. It applies to reads
// from then on and returns the previous value.
func SetSharedMemorySpin(d time.Duration) time.Duration {
	return time.Duration(shmSpin.Swap(int64(max(d, 0))))
}
