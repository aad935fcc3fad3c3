// Package collectives runs MPI-style collective operations (barrier,
// broadcast, scatter, gather, all-gather, all-to-all, reduce, all-reduce)
// over a group of ranks connected by ordinary net.Conns: rdma.Conns built by
// Join, or any reliable byte streams handed to NewGroup.
//
// # Semantics
//
// Every rank of a Group calls the same operations in the same order with
// matching arguments, as with an MPI communicator. The results are those of
// the MPI operation of the same name. Floating-point reductions are computed
// in one fixed order per element, so every rank ends with bitwise identical
// results (the order may differ from a left-to-right serial loop, as in MPI).
//
// Operations of one Group must not run concurrently; a second operation
// started while one is running fails at once (without touching the group).
//
// # Algorithms
//
// Algorithms are picked from the message size and the group size, as MPI
// libraries and NCCL do:
//
//   - Barrier: dissemination (ceil(log2 n) rounds).
//   - Broadcast: binomial tree for small messages; scatter then ring
//     all-gather (van de Geijn) for large ones.
//   - AllReduce: recursive doubling for small messages, with non-power-of-two
//     sizes folded in first; ring reduce-scatter then ring all-gather for
//     large ones.
//   - Reduce: binomial tree for small messages; ring reduce-scatter then a
//     gather of the reduced blocks for large ones.
//   - AllGather: Bruck's dissemination for small totals, ring for large.
//   - AllToAll: Bruck for small blocks, pairwise exchange for large blocks.
//   - Scatter and Gather: linear, every link to the root busy at once.
//
// Messages are cut into frames of at most 256 KiB. Each link has a sending
// goroutine, so a rank sends and receives at the same time and no send ever
// waits for the peer's send: the algorithms are free of deadlock even over
// unbuffered conns such as net.Pipe. Reductions run frame by frame as data
// arrives, while the sender keeps the link busy.
//
// # Memory
//
// Operations allocate nothing in steady state, on either engine: reductions work on views of
// the caller's slices, frames are handed to the link goroutines by value,
// and the scratch buffers some algorithms need (a received frame, a
// non-root's partial result in Reduce, Bruck's rotated copies) grow to the
// largest size used so far and are kept for the Group's lifetime. A
// cancellable ctx costs one small allocation per operation
// (context.AfterFunc).
//
// # Same-host engine
//
// When every rank of a group runs on one host as one user, Join also sets
// up a shared memory segment and every operation then moves its data
// through it instead of the conns, as MPI's sm transport and NCCL's SHM
// transport do: each step of an operation copies at most 128 KiB per rank
// into the rank's buffer, publishes it, waits for the others, and reads
// (AllReduce and Reduce: reduces, in rank order, straight into the result)
// from theirs, double-buffered, progressed by the calling goroutine with
// no hand-off. A waiting rank notices within microseconds that the group
// failed or that a peer failed or closed, within a millisecond that a
// peer's process exited, and ctx's deadline bounds a wait for a peer that
// stalls. The environment variable RDMA_COLL_ALGO picks the engine: "auto"
// (the default), "stream" (always the conns) or "shm" (Join fails without
// the segment); every rank must see the same value. See shm.go and
// shm_linux.go, and docs/security.md for how the segment is shared.
//
// # Framing and failures
//
// Every frame carries a 16-byte header: the operation's sequence number,
// its kind, its root, element type and reduction op, an algorithm step, and
// the payload length. A rank whose peer is in a different operation, or in the
// same one with other arguments, gets an error naming that peer instead of
// silently mixing data. (On a host with more ranks than CPUs, the root of a
// Broadcast of 64 KiB to 256 KiB returns once its data is in the shared
// segment, before the receivers call: it learns of a mismatch in its next
// operation, which fails naming the peer.)
//
// Any failure of an operation (a peer's connection lost, a mismatched frame,
// bad arguments, a cancelled context, Close) breaks the Group: the operation
// returns the cause, and every later operation returns an error matching
// ErrBroken and the original cause; Err reports the state. The failing rank
// wakes its own blocked reads, lets each link finish the frame it is writing
// (for at most a second), sends an abort frame saying which rank it blames
// and why, and half-closes the conn. So its peers fail too instead of waiting
// forever, and the error every rank returns is a *RankError naming the rank
// that failed first (a rank whose process died is named by its peers'
// connection errors, and they pass the name on).
//
// # Bootstrap and its security
//
// Join builds the group's conns: rank 0 listens at the root address, the
// other ranks dial it and listen for their lower-ranked peers. Every conn a
// bootstrap listener accepts is heard out in a goroutine of its own under a
// deadline of its own (10 s, or ctx's if sooner), in one of 256 places, at
// most 32 of them for one remote host (an IPv6 host counts as its /64), so
// that silent or hostile conns from one host delay nobody on another. A
// newcomer from a host that holds all its places takes the place of the
// host's oldest conn once that has held it for a second, and is otherwise
// told the listener is busy; with every place held, the listener accepts
// nothing until a place is given back or has been held for a second. A
// rank told its listener is busy dials again within ctx: a full listener
// delays a rank, never fails it. (Conns from one host compete among
// themselves: a hostile process that dials from a rank's own address
// without pause can keep that rank waiting.) With a job secret (Bootstrap.Secret
// or RDMA_JOB_SECRET, set once by whoever launches the job; cmd/rdmarun
// makes one up) a process joins only by proving it holds the secret: an
// HMAC-SHA256 over a fresh nonce of the side it connects to, which proves it
// back (the root signs the address table, a rank's listener acks), so the
// secret never crosses the wire and a recorded exchange cannot be replayed.
// A rank with a wrong secret is refused with an error that says so; the job
// goes on. Without a secret, any process that reaches the root can claim a
// rank. The secret authenticates the bootstrap only: the group's data then
// flows unauthenticated and in clear on the conns it built.
//
// # Wire format
//
// Elements of AllReduce and Reduce travel as the bytes of the host's
// representation. The package assumes that every rank is little-endian (as
// are amd64, arm64, riscv64 and ppc64le); mixing byte orders in one Group is not
// supported.
package collectives
