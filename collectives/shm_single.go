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
//   - The operation is one step. In it each rank posts, beside the step's
//     descriptor, the address in its own process of the buffer the others
//     read (for AllReduce also of the result the others write into); each
//     reader checks the descriptor as for any step, reads what it needs
//     with process_vm_readv (an AllReduce writes each piece of its block
//     of the result into the others' with process_vm_writev), and says it
//     is done with the step. A rank whose buffers others read or write
//     returns only once they said so: its buffers are the caller's again.
//     (A Broadcast's receiver, whose buffer nobody touches unless the root
//     shares the copying, returns once it has read.)
//   - The addresses a peer posts are used for nothing but reading and
//     writing that peer's own memory: a bad one fails the call (EFAULT),
//     which breaks the group with an error naming the peer. Every length
//     comes from the local call.
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

// An AllReduce copies once at every size from shmSingleMin a rank where
// every rank has a CPU (singleReduce): it is one step however large, so a
// rank that the host's other load preempts holds the others up once, not
// at every chunk (at 16 MiB two copies take 128 steps in lockstep, and on
// a loaded host took 1.5-3x as long: docs/measurements). With more ranks
// than CPUs (singleReduce false) two copies were faster at every size.

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
	return t.copyPeer(g, q, dst, addr, readPeer, "receive", "reading its buffer")
}

// writeTo copies src into rank q's memory at addr, as readFrom reads.
func (t *shmTeam) writeTo(g *Group, q int, src []byte, addr uint64) error {
	return t.copyPeer(g, q, src, addr, writePeer, "send", "writing its buffer")
}

// copyPeer moves buf to or from rank q's memory at addr with move, a
// piece at a time; op and what name the move in errors.
func (t *shmTeam) copyPeer(g *Group, q int, buf []byte, addr uint64, move func(pid int, buf []byte, addr uint64) error, op, what string) error {
	for off := 0; off < len(buf); off += shmSinglePiece {
		end := min(len(buf), off+shmSinglePiece)
		err := move(t.live.pid(q), buf[off:end], addr+uint64(off))
		if t.live.dead(q) {
			return &RankError{Rank: t.rankOf(q), Op: op, Err: errors.New("its process exited")}
		}
		if err != nil {
			return &RankError{Rank: t.rankOf(q), Op: op, Err: fmt.Errorf("%s: %w", what, err)}
		}
		if err := t.check(g, q, time.Now().UnixNano()); err != nil {
			return err
		}
	}
	return nil
}

// addrPosted is the address rank q posted with step k for reading, once
// waitAll returned for k (q cannot post k+shmDescs before this rank is
// done with k); writeAddrPosted the one for writing.
func (t *shmTeam) addrPosted(q int, k uint64) uint64 { return t.ctrl[q].desc[k%shmDescs][3].Load() }

func (t *shmTeam) writeAddrPosted(q int, k uint64) uint64 {
	return t.ctrl[q].desc[k%shmDescs][4].Load()
}

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

// singleCopy is the team's operations that copy once between the callers'
// buffers (process_vm_readv and process_vm_writev), a view over the team:
// the state is the team's, these are its steps.
type singleCopy struct{ *shmTeam }

func (t *shmTeam) copyOnce() singleCopy { return singleCopy{t} }

// open begins a step of nbytes in which this member posts addr for the
// others to read, and waits for every member's post of it.
func (t singleCopy) open(g *Group, nbytes int, addr uint64) (uint64, error) {
	t.expect(nbytes)
	op, nb := opWord(g.cur), uint64(nbytes)
	k, _, err := t.begin(g)
	if err != nil {
		return 0, err
	}
	t.postAt(k, op, nb, addr, 0)
	return k, t.waitAll(g, k, op, nb)
}

// broadcast: the root posts buf's address, every other rank reads
// buf from it. A receiver waits for the root's post alone, not for the
// other receivers, and returns once it has read; the root waits for every
// receiver's post and checks its descriptor (so calls that disagree, on
// the root too, fail on the root and the rank that disagrees), then for
// every receiver's word that it read. With more ranks than CPUs a
// receiver that the host runs late then holds up the root alone, not the
// other receivers too (each of which it would have to wake).
//
// Where every rank has a CPU of its own (singleReduce, agreed by all), the
// root shares the copying instead of only waiting: each receiver also
// posts its buf's address, and the root writes that receiver's share
// (broadcastShare) into it while the receiver reads the rest; every rank
// returns once every other one is done with the step (the receivers' bufs
// complete, the root's read). With one receiver that is two CPUs copying
// instead of one.
func (t singleCopy) broadcast(g *Group, root int, buf []byte) error {
	if t.singleReduce {
		return t.broadcastShared(g, root, buf)
	}
	t.expect(len(buf))
	op, nb := opWord(g.cur), uint64(len(buf))
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	if t.me != root {
		t.post(k, op, nb)
		if err := t.waitFor(g, root, k, op, nb); err != nil {
			return err
		}
		if err := t.readFrom(g, root, buf, t.addrPosted(root, k)); err != nil {
			return err
		}
		t.done(k)
		return nil
	}
	addr, _ := t.lend(buf, nil)
	defer t.unlend()
	t.postAt(k, op, nb, addr, 0)
	if err := t.waitAll(g, k, op, nb); err != nil {
		return err
	}
	t.done(k)
	return t.awaitRead(g, k)
}

// broadcastShared is singleCopy.broadcast with the root sharing the copying.
func (t singleCopy) broadcastShared(g *Group, root int, buf []byte) error {
	t.expect(len(buf))
	op, nb := opWord(g.cur), uint64(len(buf))
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	addr, _ := t.lend(buf, nil)
	defer t.unlend()
	t.postAt(k, op, nb, addr, addr)
	if err := t.waitAll(g, k, op, nb); err != nil {
		return err
	}
	if t.me != root {
		lo, hi := broadcastShare(len(buf), t.n, root, t.me)
		from := t.addrPosted(root, k)
		if err := t.readFrom(g, root, buf[:lo], from); err != nil {
			return err
		}
		if err := t.readFrom(g, root, buf[hi:], from+uint64(hi)); err != nil {
			return err
		}
		t.done(k)
		return t.awaitRead(g, k)
	}
	for i := 1; i < t.n; i++ {
		q := (t.me + i) % t.n
		lo, hi := broadcastShare(len(buf), t.n, root, q)
		if err := t.writeTo(g, q, buf[lo:hi], t.writeAddrPosted(q, k)+uint64(lo)); err != nil {
			return err
		}
	}
	t.done(k)
	return t.awaitRead(g, k)
}

// broadcastShare is the part [lo, hi) of an nbytes broadcast from root
// that the root writes into receiver q's buffer when it shares the
// copying: a different n-th of it for each receiver, so that the root
// and each receiver copy (n-1)/n of the buffer each. Its bounds are
// multiples of 64 bytes, so that the root's writes and the receiver's
// reads share no cache line.
func broadcastShare(nbytes, n, root, q int) (lo, hi int) {
	j := (q - root + n) % n // 1..n-1
	per := nbytes / n &^ 63
	lo = (j - 1) * per
	return lo, lo + per
}

// allGather: every rank posts send's address and reads the
// others' blocks from theirs.
func (t singleCopy) allGather(g *Group, send, recv []byte) error {
	return t.gatherBlocks(g, send, recv, len(send), 0)
}

// allToAll: every rank posts send's address; rank r reads block r
// of every other rank's send.
func (t singleCopy) allToAll(g *Group, send, recv []byte, blk int) error {
	return t.gatherBlocks(g, send, recv, blk, uint64(t.me*blk))
}

// gatherBlocks is one step in which every rank posts send's address
// and reads, from each other rank q's send at off, the blk bytes that go
// to recv's block q (the block of q's rank in the group, where the team
// is a host's part of it).
func (t singleCopy) gatherBlocks(g *Group, send, recv []byte, blk int, off uint64) error {
	addr, _ := t.lend(send, nil)
	defer t.unlend()
	k, err := t.open(g, blk, addr)
	if err != nil {
		return err
	}
	for i := 1; i < t.n; i++ {
		q := (t.me + i) % t.n // not all at rank 0 first
		r := t.rankOf(q)
		if err := t.readFrom(g, q, recv[r*blk:(r+1)*blk], t.addrPosted(q, k)+off); err != nil {
			return err
		}
	}
	t.done(k)
	return t.awaitRead(g, k)
}

// allReduce is one step: a reduce-scatter (singleCopy.reduceScatter) in
// which each member, as soon as it has computed a piece of its block,
// writes it into every other member's recv too, from its cache (the
// all-gather's copy, without a second step or a second read of the block
// from memory). A member returns once every other one said it is done
// with the step: its recv is complete and its send read.
func (t singleCopy) allReduce(g *Group, send, recv []byte) error {
	defer t.unlend()
	return t.reduceScatter(g, send, recv, true)
}

// singleBlock is member i's block of an n-member reduce-scatter of nbytes
// of elements of e bytes.
func singleBlock(nbytes, e, n, i int) (lo, hi int) {
	lo, hi = blockRange(nbytes/e, n, i)
	return lo * e, hi * e
}

// reduceScatter is one step in which every member of t posts
// send's address and computes its block of the result into recv
// (singleBlock), reading the other members' pieces of that block into its
// own segment buffers (free in this step: every member posted it, so every
// member read the steps before) and combining the contributions in member
// order, as the two-copy path does. Each block is computed once, so that
// every member gets it bitwise the same. recv may be send: a member writes
// only its own block of recv, which no other member reads of its send
// (each reads its own block), and keeps its own piece aside first. The
// members may still read send when it returns; singleCopy.allGatherBlocks
// waits for them, and the caller unlends both.
//
// With push, each piece of the block, once computed, is written into
// the same place of every other member's recv, whose address each posted
// with the step, and the step ends only once every member is done with
// it (every recv is complete). In place, a member writes a piece into a
// peer's buffer only after it read that piece of it.
func (t singleCopy) reduceScatter(g *Group, send, recv []byte, push bool) error {
	t.expect(len(send))
	n, e := t.n, g.red.elem
	op, nb := opWord(g.cur), uint64(len(send))
	inPlace := unsafe.SliceData(send) == unsafe.SliceData(recv)
	sendAddr, recvAddr := t.lend(send, recv)
	if !push {
		recvAddr = 0
	}
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	t.postAt(k, op, nb, sendAddr, recvAddr)
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
		for i := 1; push && i < n; i++ {
			q := (t.me + i) % n
			if err := t.writeTo(g, q, dst, t.writeAddrPosted(q, k)+uint64(p)); err != nil {
				return err
			}
		}
	}
	t.done(k)
	if push {
		return t.awaitRead(g, k)
	}
	return nil
}

// allGatherBlocks is one step in which every member of t posts
// recv's address, reads every other member's block (singleBlock) from it,
// and waits until the others read its own: send and recv of the step
// before are the caller's again.
func (t singleCopy) allGatherBlocks(g *Group, recv []byte) error {
	n, e := t.n, g.red.elem
	_, recvAddr := t.lend(t.lent[0], recv)
	k, err := t.open(g, len(recv), recvAddr)
	if err != nil {
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

// gatherCounterparts is one step in which every member of t posts recv's
// address and reads, from each other member q, the blocks of blk bytes of
// q's counterparts (the ranks of q's local index on every host, whose
// blocks q has gathered: members[i][q] on host i), and waits until the
// others have read this member's: an AllGather's host step
// (hierarchy.allGather).
func (t singleCopy) gatherCounterparts(g *Group, recv []byte, blk int, members [][]int) error {
	_, addr := t.lend(nil, recv)
	k, err := t.open(g, len(recv), addr)
	if err != nil {
		return err
	}
	for i := 1; i < t.n; i++ {
		q := (t.me + i) % t.n
		from := t.addrPosted(q, k)
		for _, host := range members {
			r := host[q]
			if err := t.readFrom(g, q, recv[r*blk:(r+1)*blk], from+uint64(r*blk)); err != nil {
				return err
			}
		}
	}
	t.done(k)
	return t.awaitRead(g, k)
}

// Which parts of a buffer a member reads in singleCopy.readParts.
type partsRead int

const (
	partOwn       partsRead = iota // its own part, from the root
	partsButOwn                    // every part but its own, from the root
	partsOfOwners                  // every other part, from its owner
)

// readParts is one step of a Broadcast across hosts
// (hierarchy.broadcast): every member posts buf's address and reads parts
// of buf (member q's part: blockRange over its bytes) as which says; root
// is the member that has them all (partOwn, partsButOwn) and reads
// nothing. Every member returns once the others are done with the step.
func (t singleCopy) readParts(g *Group, buf []byte, root int, which partsRead) error {
	addr, _ := t.lend(buf, nil)
	k, err := t.open(g, len(buf), addr)
	if err != nil {
		return err
	}
	read := func(q, part int) error {
		lo, hi := blockRange(len(buf), t.n, part)
		return t.readFrom(g, q, buf[lo:hi], t.addrPosted(q, k)+uint64(lo))
	}
	switch {
	case which == partsOfOwners:
		for i := 1; i < t.n; i++ {
			q := (t.me + i) % t.n
			if err := read(q, q); err != nil {
				return err
			}
		}
	case t.me == root:
	case which == partOwn:
		if err := read(root, t.me); err != nil {
			return err
		}
	default:
		for part := range t.n {
			if part != t.me {
				if err := read(root, part); err != nil {
					return err
				}
			}
		}
	}
	t.done(k)
	return t.awaitRead(g, k)
}
