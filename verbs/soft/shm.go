package soft

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The same-host path. When both ends of a connection run on one host (same
// boot ID) as the same user, the handshake may pick shared memory instead
// of TCP to carry the frames: each direction is a ring in a sealed memfd
// that its reader creates and its writer maps, with an eventfd per
// direction for wake-ups, parked on Go's runtime poller. The handshake's
// TCP connection stays open as the liveness channel: when the peer process
// dies the kernel closes it and the connection fails at once. A connection
// starts on TCP and moves to the rings in the background once it has
// carried SetSharedMemorySwitch's bytes, or received a few frames
// (SetSharedMemorySwitchFrames; shm_switch_linux.go). See
// shm_ring_linux.go (the ring), shm_setup_linux.go (passing it),
// shm_offer_linux.go (the handshake) and shm_transport_linux.go (the
// transport); elsewhere only TCP is used.
//
// What a peer can reach (the security model, as on a NIC): only bytes
// inside MRs it was granted, within bounds, with the access the MR was
// registered with, and nothing after Dereg, Destroy or disconnect; memory
// used only as a send source is never reachable.
//
//   - On TCP, frames are the only input, and every RDMA WRITE or READ is
//     checked against the target MR's rkey, bounds and access before a byte
//     moves (engine.go).
//   - On shared memory the same frames travel through the rings, with the
//     same checks. Payloads are copied into the ring by the sender and out
//     of it by the receiver: no application memory (verbs.AllocMemory is
//     private anonymous memory, with no descriptor) is ever mapped by the
//     peer. A ring holds only the bytes the two ends send each other and
//     the ring's control words; the peer can write both (every record and
//     position read from it is checked), and that is all it reaches. A ring
//     memfd is mode 0600, so another user cannot reopen it (a peer's ring
//     that is not is refused).
//   - Shared memory is offered only between processes of the same effective
//     uid (SO_PEERCRED, checked by both ends on the unix socket that passes
//     the rings), root to root included; any other peer gets TCP.
//   - Everything the peer sends is bounded by local limits before use: the
//     ring a peer passes is mapped only up to this side's own ring size
//     (SetSharedMemoryRing), and the unix socket's name is derived by each
//     side from the TCP connection's addresses, never read from the peer.
//     Every read of the peer during setup has a deadline (SetHandshakeTimeout,
//     and at most shmSetupTimeout for the ring exchange), and a listener
//     gives each remote host at most SetMaxHandshakesPerHost of its
//     SetMaxHandshakes handshake slots.
//
// On a NIC (the rdmacore provider) the device enforces the same model in
// hardware: rkeys, bounds and access flags per MR, invalidated on Dereg.

// transportShm is bit 1 of the handshake's transport set.
const transportShm = 1 << 1

var (
	shmOn       atomic.Bool  // offer and accept shared memory
	shmSpin     atomic.Int64 // ns a reader spins on an empty ring before sleeping
	shmRingSize atomic.Int64 // bytes of data in the rings this side creates, and the most it maps
	shmUsed     atomic.Int64 // connections set up over shared memory (tests)
	shmAfter    atomic.Int64 // bytes a connection carries on TCP before it moves to shared memory
	shmAfterN   atomic.Int64 // or frames its active side receives on TCP first; 0: bytes alone
)

// Ring sizes: the default, and the range SetSharedMemoryRing accepts.
const (
	defaultShmRing = 4 << 20
	shmRingMin     = 64 << 10
	shmRingMax     = 64 << 20
)

// defaultShmSwitch is how many bytes a connection carries on TCP, both
// ways, before it moves to shared memory. Setting up the rings costs each
// connection CPU time off its path, but on a small host CPU time taken
// from the connections being set up next: measured with rdmaconns (1000
// connections each echoing a byte, a 2-CPU VM where a first touch of a
// page costs 15-80 us) the exchange right after the handshake made setup
// 1.7-2x the TCP path's; a connection that carries less than this (an
// idle one, a short request) never pays for it, nor holds the rings'
// memory and descriptors.
const defaultShmSwitch = 64 << 10

// defaultShmSwitchFrames is how many frames a connection's active side
// receives on TCP before the connection moves to shared memory, if it has
// not carried defaultShmSwitch's bytes by then: a connection that talks in
// small messages (a quiet request/response connection, raft's heartbeats)
// gets shared memory's latency too, after four to eight round trips (each
// brings the dialing side its answer, and at times an acknowledgement of
// its own), while a short-lived one (a request or two, then closed) never
// pays for the rings. With 16, hashicorp/raft's heartbeats (every 100-200
// ms) had not all moved 2 s after the cluster went quiet (bench/); with 8
// they had. The move costs about 0.4 ms of CPU time, both ends together,
// and a few descriptors (BenchmarkShmSwitch on a shared 2-CPU host; the
// rings' reader spin adds some 0.2 ms over a few round trips after it).
const defaultShmSwitchFrames = 8

// A connection that has lived shmSettleAge moves at its shmSettleFrames'th
// frame received on TCP (with the frame rule on): a pooled, long-lived
// connection that talks seldom (hashicorp/raft's heartbeat connections,
// which its replication pipeline may then take from the pool) gets shared
// memory within a few messages, while a short-lived one (a request or two
// within its first 100 ms) still never pays for the rings. With 8 frames
// alone bench/'s raft-apply ran bimodally at 0.57-0.85x TCP's entries over
// shared memory, its pipeline on a TCP-path connection in some runs; with
// 2 frames it ran at 1.37-1.81x (docs/measurements/2026-11-29-soft-chunk.md).
const (
	shmSettleAge    = 100 * time.Millisecond
	shmSettleFrames = 2
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
// Its first few microseconds poll without yielding while that catches the
// data, as it does when the peer runs on another CPU (busyspin.go).
const defaultShmSpin = 50 * time.Microsecond

func init() {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("RDMA_SOFT_SHM")))
	shmOn.Store(!(v == "0" || v == "off" || v == "false" || v == "no"))
	shmSpin.Store(int64(defaultShmSpin))
	shmRingSize.Store(defaultShmRing)
	shmAfter.Store(defaultShmSwitch)
	if s := os.Getenv("RDMA_SOFT_SHM_SWITCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			shmAfter.Store(n)
		}
	}
	shmAfterN.Store(defaultShmSwitchFrames)
	if s := os.Getenv("RDMA_SOFT_SHM_SWITCH_FRAMES"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			shmAfterN.Store(n)
		}
	}
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

// SetSharedMemorySwitch sets how many bytes a connection set up afterwards
// carries on TCP, both ways together, before it moves to shared memory
// (default 64 KiB; 0: at once; RDMA_SOFT_SHM_SWITCH sets it at start-up);
// it moves earlier if it talks in small frames first
// (SetSharedMemorySwitchFrames). The move happens in the background, once,
// at a frame boundary in each direction; until then the connection costs
// no more than one on TCP. It returns the previous value.
func SetSharedMemorySwitch(bytes int) int {
	return int(shmAfter.Swap(int64(max(bytes, 0))))
}

// SetSharedMemorySwitchFrames sets how many frames (messages, their
// acknowledgements) the dialing side of a connection set up afterwards
// receives on TCP before the connection moves to shared memory, when it
// has not carried SetSharedMemorySwitch's bytes by then (default 8, and 2
// once the connection has lived 100 ms; 0: the byte count alone decides;
// RDMA_SOFT_SHM_SWITCH_FRAMES sets it at start-up). It returns the
// previous value.
func SetSharedMemorySwitchFrames(frames int) int {
	return int(shmAfterN.Swap(int64(max(frames, 0))))
}

// switchRule is when a connection on its way to shared memory moves: once
// it has carried bytes on TCP (both ways, 0: at once), or once its active
// side has received frames frames there (0: no such rule, nor the next), or
// settleFrames once it is settleAge old (0: no such rule), whichever comes
// first.
type switchRule struct {
	bytes, frames int64
	settleFrames  int64
	settleAge     time.Duration
}

// currentSwitchRule is the rule for a connection set up now.
func currentSwitchRule() switchRule {
	return switchRule{bytes: shmAfter.Load(), frames: shmAfterN.Load(),
		settleFrames: shmSettleFrames, settleAge: shmSettleAge}
}

// immediate reports whether the rule moves a connection at once.
func (r switchRule) immediate() bool { return r.bytes == 0 }

// due reports whether a connection that has carried bytes and received
// frames has reached the rule; age is how long it has lived (read only when
// the settled rule may decide: a clock read per frame is spared the rest).
func (r switchRule) due(bytes, frames int64, age func() time.Duration) bool {
	if bytes >= r.bytes {
		return true
	}
	if r.frames <= 0 {
		return false
	}
	return frames >= r.frames || r.settleFrames > 0 && frames >= r.settleFrames && age() >= r.settleAge
}

// SetSharedMemorySpin sets how long a reader of a shared-memory connection
// polls an empty ring (after a busy start, yielding the CPU between polls)
// before it sleeps on its eventfd: default 50 us, RDMA_SOFT_SHM_SPIN ("5us",
// "0") sets it at start-up, 0 never spins. Spinning costs up to that much
// CPU time per wait and saves the wake-up of a sleeping reader (a system
// call on each side and a scheduler wake-up) when data arrives within it.
// It applies to reads from then on and returns the previous value.
func SetSharedMemorySpin(d time.Duration) time.Duration {
	return time.Duration(shmSpin.Swap(int64(max(d, 0))))
}

// SetSharedMemoryRing sets the size of the ring that each shared-memory
// connection set up afterwards creates for its incoming direction (default
// 4 MiB; rounded up to a power of two between 64 KiB and 64 MiB), which is
// also the largest ring of a peer's that it maps: a connection costs at
// most twice this much shared memory, whatever the peer asks for, and only
// as much as it has used (pages are committed when first written). Larger
// rings ride out a busy scheduler better: a 64 KiB rdma.Conn stream on a
// loaded 2-CPU host (rdmaperf -fork) ran at about 1.4x TCP loopback with
// 256 KiB rings, 2x with 512 KiB, 2.6x with 1 MiB and 3.5x with 4 MiB. A peer
// offering a larger ring gets TCP; the passive side sizes its own ring at
// most as large as the active side's. It returns the previous value.
func SetSharedMemoryRing(size int) int {
	n := int64(shmRingMin)
	for n < int64(size) && n < shmRingMax {
		n <<= 1
	}
	return int(shmRingSize.Swap(n))
}
