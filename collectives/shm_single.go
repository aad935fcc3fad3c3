package collectives

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"
)

// Single copy. Through the segment a byte is copied twice: into the
// sender's buffer in the segment, then out into the receiver's. Where the
// ranks may read each other's memory (process_vm_readv: processes of one
// user, as the group's are, unless the host forbids it), a large Broadcast,
// AllGather, AllToAll or AllReduce copies once instead, from the caller's
// buffer on one rank straight into the caller's buffer on another, as
// Open MPI's sm transport does with CMA:
//
//   - The operation is one step (AllReduce two). In it each rank posts,
//     beside the step's descriptor, the address in its own process of the
//     buffer the others read; each reader checks the descriptor as for any
//     step, reads what it needs with process_vm_readv, and says it read
//     the step. A rank returns only once every rank that reads its buffer
//     said so: the buffer is the caller's again.
//   - The address a peer posts is used for nothing but reading that peer's
//     own memory: a bad one fails the read (EFAULT), which breaks the group
//     with an error naming the peer. Every length comes from the local call.
//     Reads go a piece at a time with the group's checks between pieces;
//     one piece is not bounded by ctx, so a peer whose memory there stalls
//     the kernel (a mapping of a file system that does not answer) holds
//     this rank for as long. The peer is a process of the same user, which
//     can stop this one by other means anyway.
//   - A read names the peer by its process id, which the kernel gave at
//     setup; after each read the peer's pidfd is checked: while it has not
//     exited, the id was still its process (the pidfd keeps the id from
//     another process until its exit was seen).
//   - Whether it works is tried at Join (each rank reads the segment's
//     magic through every other rank's mapping of it) and agreed by all:
//     either every rank copies once or none does, so all run the same
//     steps.

// shmSingleMin is the size per piece (a broadcast's buffer, an all-gather's
// or all-to-all's block, an all-reduce's share) from which an operation
// copies once: below it, a system call per peer costs more than the second
// copy of a chunk that stays in the cache.
const shmSingleMin = 64 << 10

// shmSingleReduceMax bounds the AllReduce of one host that copies once.
// Above it the two-copy path wins where the callers' data was just
// written (in the writer's cache, as after a computation): a rank copies
// its own data from its cache into the segment, where the rank reading it
// finds it a chunk at a time, while a single copy reads all of it across
// cores. 2 ranks, 4 MiB, every run's data written just before: 0.73 ms
// with two copies, 0.94 with one. With more ranks than CPUs
// (singleReduce false) two copies were faster at every size.
const shmSingleReduceMax = 1 << 20

// shmSinglePiece bounds one read, so that a failure elsewhere in the
// group, Close or ctx ends a large operation within a piece's time.
const shmSinglePiece = 1 << 20

// singleCopyEnv set to "0" keeps every operation on the segment's two
// copies (for comparison).
const singleCopyEnv = "RDMA_COLL_SINGLE"

// probeSingleCopy returns 1 if this rank can read every other rank's
// memory: the segment's magic through the address where that rank mapped
// it.
func (t *shmTeam) probeSingleCopy() int32 {
	if os.Getenv(singleCopyEnv) == "0" {
		return 0
	}
	var magic [8]byte
	for q := range t.n {
		if q == t.me {
			continue
		}
		if readPeer(t.live.pid(q), magic[:], t.ctrl[q].base.Load()) != nil ||
			binary.LittleEndian.Uint64(magic[:]) != shmMagic || t.live.dead(q) {
			return 0
		}
	}
	return 1
}

// lend returns where a's and b's data are in this process, for the peers
// to read during the operation, and holds them until unlend (see lent).
func (t *shmTeam) lend(a, b []byte) (addrA, addrB uint64) {
	t.lent = [2][]byte{a, b}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(a)))), uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// unlend ends what lend began; the peers have read the buffers.
func (t *shmTeam) unlend() { t.lent = [2][]byte{} }

// readFrom copies len(dst) bytes of rank q's memory at addr into dst, a
// piece at a time, checking between pieces that the wait for q can still
// succeed.
func (t *shmTeam) readFrom(g *Group, q int, dst []byte, addr uint64) error {
	for off := 0; off < len(dst); off += shmSinglePiece {
		end := min(len(dst), off+shmSinglePiece)
		err := readPeer(t.live.pid(q), dst[off:end], addr+uint64(off))
		if t.live.dead(q) {
			return &RankError{Rank: t.rankOf(q), Op: "receive", Err: errors.New("its process exited")}
		}
		if err != nil {
			return &RankError{Rank: t.rankOf(q), Op: "receive", Err: fmt.Errorf("reading its buffer: %w", err)}
		}
		if err := t.check(g, q, time.Now().UnixNano()); err != nil {
			return err
		}
	}
	return nil
}

// addrPosted is the address rank q posted with step k, once waitAll
// returned for k (q cannot post k+2 before this rank is done with k).
func (t *shmTeam) addrPosted(q int, k uint64) uint64 { return t.ctrl[q].desc[k&1][3].Load() }

// awaitRead waits until every other rank has read step k (from this
// rank's buffer, in a single-copy step).
func (t *shmTeam) awaitRead(g *Group, k uint64) error {
	for q := range t.n {
		if q == t.me {
			continue
		}
		c := t.ctrl[q]
		if err := t.await(g, q, &c.readDone, &c.sleepRead, k); err != nil {
			return err
		}
	}
	return nil
}

// broadcastSingle: the root posts buf's address, every other rank reads
// buf from it.
func (t *shmTeam) broadcastSingle(g *Group, root int, buf []byte) error {
	op, nb := opWord(g.cur), uint64(len(buf))
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	var addr uint64
	if t.me == root {
		addr, _ = t.lend(buf, nil)
		defer t.unlend()
	}
	t.postAt(k, op, nb, addr)
	if err := t.waitAll(g, k, op, nb); err != nil {
		return err
	}
	if t.me != root {
		if err := t.readFrom(g, root, buf, t.addrPosted(root, k)); err != nil {
			return err
		}
		t.done(k)
		return nil
	}
	t.done(k)
	return t.awaitRead(g, k)
}

// allGatherSingle: every rank posts send's address and reads the
// others' blocks from theirs.
func (t *shmTeam) allGatherSingle(g *Group, send, recv []byte) error {
	return t.gatherBlocksSingle(g, send, recv, len(send), 0)
}

// allToAllSingle: every rank posts send's address; rank r reads block r
// of every other rank's send.
func (t *shmTeam) allToAllSingle(g *Group, send, recv []byte, blk int) error {
	return t.gatherBlocksSingle(g, send, recv, blk, uint64(t.me*blk))
}

// gatherBlocksSingle is one step in which every rank posts send's address
// and reads, from each other rank q's send at off, the blk bytes that go
// to recv's block q.
func (t *shmTeam) gatherBlocksSingle(g *Group, send, recv []byte, blk int, off uint64) error {
	op := opWord(g.cur)
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	addr, _ := t.lend(send, nil)
	defer t.unlend()
	t.postAt(k, op, uint64(blk), addr)
	if err := t.waitAll(g, k, op, uint64(blk)); err != nil {
		return err
	}
	for i := 1; i < t.n; i++ {
		q := (t.me + i) % t.n // not all at rank 0 first
		if err := t.readFrom(g, q, recv[q*blk:(q+1)*blk], t.addrPosted(q, k)+off); err != nil {
			return err
		}
	}
	t.done(k)
	return t.awaitRead(g, k)
}

// allReduceSingle: a reduce-scatter, then an all-gather, each one step
// (see reduceScatterSingle and allGatherBlocksSingle).
func (t *shmTeam) allReduceSingle(g *Group, send, recv []byte) error {
	defer t.unlend()
	if err := t.reduceScatterSingle(g, send, recv); err != nil {
		return err
	}
	return t.allGatherBlocksSingle(g, recv)
}

// singleBlock is member i's block of an n-member reduce-scatter of nbytes
// of elements of e bytes.
func singleBlock(nbytes, e, n, i int) (lo, hi int) {
	lo, hi = blockRange(nbytes/e, n, i)
	return lo * e, hi * e
}

// reduceScatterSingle is one step in which every member of t posts
// send's address and computes its block of the result into recv
// (singleBlock), reading the other members' pieces of that block into its
// own segment buffers (free in this step: every member posted it, so every
// member read the steps before) and combining the contributions in member
// order, as the two-copy path does. Each block is computed once, so that
// every member gets it bitwise the same. recv may be send: a member writes
// only its own block of recv, which no other member reads of its send
// (each reads its own block), and keeps its own piece aside first. The
// members may still read send when it returns; allGatherBlocksSingle
// waits for them, and the caller unlends both.
func (t *shmTeam) reduceScatterSingle(g *Group, send, recv []byte) error {
	n, e := t.n, g.red.elem
	op, nb := opWord(g.cur), uint64(len(send))
	inPlace := unsafe.SliceData(send) == unsafe.SliceData(recv)
	sendAddr, _ := t.lend(send, recv)
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	t.postAt(k, op, nb, sendAddr)
	if err := t.waitAll(g, k, op, nb); err != nil {
		return err
	}
	const piece = shmChunk / 2
	a, b := t.bufs[t.me][0][:piece], t.bufs[t.me][0][piece:]
	own := t.bufs[t.me][1][:piece]
	lo, hi := singleBlock(len(send), e, n, t.me)
	for p := lo; p < hi; p += piece {
		pe := min(hi, p+piece)
		dst := recv[p:pe]
		mine := send[p:pe]
		if inPlace {
			mine = own[:copy(own, mine)]
		}
		part := func(q int, into []byte) ([]byte, error) {
			if q == t.me {
				return mine, nil
			}
			into = into[:pe-p]
			return into, t.readFrom(g, q, into, t.addrPosted(q, k)+uint64(p))
		}
		s0, err := part(0, a)
		if err != nil {
			return err
		}
		s1, err := part(1, b)
		if err != nil {
			return err
		}
		g.red.fn3(dst, s0, s1, g.red.op)
		for q := 2; q < n; q++ {
			sq, err := part(q, a)
			if err != nil {
				return err
			}
			g.red.fn(dst, sq, g.red.op, false)
		}
	}
	t.done(k)
	return nil
}

// allGatherBlocksSingle is one step in which every member of t posts
// recv's address, reads every other member's block (singleBlock) from it,
// and waits until the others read its own: send and recv of the step
// before are the caller's again.
func (t *shmTeam) allGatherBlocksSingle(g *Group, recv []byte) error {
	n, e := t.n, g.red.elem
	op, nb := opWord(g.cur), uint64(len(recv))
	_, recvAddr := t.lend(t.lent[0], recv)
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	t.postAt(k, op, nb, recvAddr)
	if err := t.waitAll(g, k, op, nb); err != nil {
		return err
	}
	for i := 1; i < n; i++ {
		q := (t.me + i) % n
		lo, hi := singleBlock(len(recv), e, n, q)
		if err := t.readFrom(g, q, recv[lo:hi], t.addrPosted(q, k)+uint64(lo)); err != nil {
			return err
		}
	}
	t.done(k)
	return t.awaitRead(g, k)
}
