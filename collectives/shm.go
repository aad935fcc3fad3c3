package collectives

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// The same-host engine. When every rank of a group runs on one host (same
// boot, network namespace and user), Join sets up one shared memory segment
// for the group and every operation moves its data through it instead of
// the conns, as MPI's sm/vader and NCCL's SHM transports do:
//
//   - Each rank owns a control block (step counters and an operation
//     descriptor, each on its own cache line) and a slot of two chunk
//     buffers. An operation is a sequence of steps, numbered across the
//     group's lifetime: in step k a rank copies its part of the chunk into
//     its buffer k%2, publishes k, waits until every rank published k (a
//     Broadcast's receiver: the root), reads what it needs from the others'
//     buffers, and publishes that it read k.
//     A buffer is written again at step k+2 only once every rank read step
//     k, so large messages are pipelined chunk by chunk, double-buffered
//     (a step that wrote nothing into it waits for step k-2 only: begin).
//     A Broadcast's root with more ranks than CPUs returns once its data is
//     in the segment (shm_eager.go).
//   - The calling goroutine makes all the progress: it spins on the peers'
//     counters (yielding the CPU after a short while), with no goroutine
//     hand-off and no system call per chunk.
//   - AllReduce and Reduce reduce straight from the buffers into the
//     caller's result, every rank combining the n contributions in rank
//     order: each element is computed the same way everywhere, so the
//     results are bitwise identical.
//   - A waiting rank checks, every few microseconds of waiting, whether the
//     group failed here (an error, Close, or ctx's deadline or
//     cancellation), whether a peer said it failed or closed (its control
//     block's state word, with the reason), and, every millisecond, whether
//     a peer's process is gone (a pidfd per peer process). Nothing waits
//     unboundedly: a peer that stops without dying is waited for until
//     ctx's deadline.
//   - Each step's descriptor (sequence number, operation, element type,
//     root, length) is compared with the waiting rank's own, so ranks that
//     call different operations or pass different lengths fail with the
//     same error as on the conns instead of exchanging garbage.
//
// Nothing a peer writes into the segment is used as a length, an offset or
// a count: every size comes from the local call and the segment's layout is
// computed by each rank from the group size alone. (A single-copy step's
// address is used only to read that peer's own memory: shm_single.go.) How the segment is
// created and shared (a sealed memfd passed over a unix socket whose name
// each side derives itself, to processes of the same user only) is in
// shm_linux.go.

// shmChunk is the bytes of one step of one rank: small enough that a
// chunk's copy and reduction stay in the cache shared by the cores, large
// enough that a step's synchronization is amortized. A multiple of 8, so no
// element straddles chunks.
const shmChunk = 128 << 10

// shmMaxRanks bounds the group size that shares one segment.
const shmMaxRanks = 64

// shmTextMax bounds the failure reason a rank leaves in its control block.
const shmTextMax = 200

// shmCtrl is a rank's control block, laid over the segment. Its owner
// writes all but the last cache line, which the ranks waiting on the owner
// write.
type shmCtrl struct {
	posted atomic.Uint64 // last step whose contribution is in the buffer; a futex word (low half)
	_      [56]byte
	// desc[k%shmDescs] describes step k: step, operation word, length,
	// and for a single-copy step the address of the buffer the peers read
	// from and of the one they write into (a single-copy AllReduce's
	// result); padded to whole cache lines.
	desc     [shmDescs][8]atomic.Uint64
	readDone atomic.Uint64 // last step whose peers' buffers this rank read; a futex word (low half)
	_        [56]byte
	state    atomic.Uint64 // shmLive, shmClosed, or shmAborted | blamed<<32
	textLen  atomic.Uint64 // bytes of text, at most shmTextMax
	text     [shmTextMax]byte
	cpu      atomic.Uint32 // 1 + the CPU this rank waits on; 0: not waiting or not known
	_        [4]byte
	base     atomic.Uint64 // where this rank's process mapped the segment (shm_single.go)
	_        [24]byte
	// How many ranks sleep on posted and on readDone: the owner wakes them
	// after a store only if there are any.
	sleepPosted atomic.Uint32
	sleepRead   atomic.Uint32
	_           [56]byte
}

const shmCtrlSize = int(unsafe.Sizeof(shmCtrl{}))

// shmDescs is how many steps' descriptors a control block holds: twice
// the buffers, so that a step that wrote nothing into its buffer (a
// barrier's, a Broadcast receiver's) lets the rank start the next step on
// that buffer before every peer has checked it (begin).
const shmDescs = 4

// States of a rank's control block.
const (
	shmLive    = 0
	shmClosed  = 1
	shmAborted = 2
)

// shmLayout is the segment's layout for n ranks: a header page, the control
// blocks, then each rank's two buffers. Every rank computes it from n.
type shmLayout struct {
	n, ctrlOff, dataOff, size int
}

const shmMagic = 0x6c6c6f632d616d64 // "dma-coll"

func layoutFor(n int) shmLayout {
	const page = 4096
	l := shmLayout{n: n, ctrlOff: page}
	l.dataOff = (l.ctrlOff + n*shmCtrlSize + page - 1) / page * page
	l.size = l.dataOff + n*2*shmChunk
	return l
}

// shmTeam is one rank's view of the segment. Its step counter, buffers and
// wait state belong to the goroutine running the current operation.
type shmTeam struct {
	seg   []byte
	n, me int
	// ranks[q] is member q's rank in the group (nil: q itself, the team is
	// the whole group); groupSize is the group's size. Errors name ranks.
	ranks     []int
	groupSize int
	ctrl      []*shmCtrl
	bufs      [][2][]byte
	step      uint64
	live      *shmLiveness // the peers' processes
	free      func()       // unmaps the segment and closes the pidfds

	// spin is how long a wait spins before it sleeps (ns).
	spin int64
	// sleeps[q]: a wait for rank q sleeps on a futex in the segment; false
	// for ranks of this process, which the Go scheduler runs: a thread
	// blocked in the kernel would hold its P from them.
	sleeps   []bool
	nextLive int64 // unix ns of the next liveness check
	sleepMax int64 // longest sleep of a wait (ns): shmSleepMax
	// spreads: there is a CPU for every rank, so a rank that finds the
	// rank it waits for queued on its own CPU moves to another one rather
	// than take turns with it on one CPU (which the kernel, seeing two
	// processes that wake each other, tends to keep them on). nextMove is
	// the earliest unix ns of the next such move.
	spreads  bool
	nextMove int64
	// yields: the waits of the operation under way yield the CPU for a
	// while before they sleep (expect, nextWait).
	yields bool
	// single: every rank can read the others' memory (process_vm_readv),
	// so large operations copy once, from the caller's buffer on one rank
	// to the caller's buffer on another (shm_single.go).
	single bool
	// singleReduce: AllReduce copies once too, and a single-copy
	// Broadcast's root shares the copying (singleCopy.broadcast), agreed where
	// every rank has a CPU of its own (spreads): with more ranks than CPUs
	// the extra waits cost more than the copy they save.
	singleReduce bool
	// lent holds the caller's buffers whose addresses a single-copy
	// operation posts, for its duration: stored here, they escape to the
	// heap, where nothing moves them (a goroutine's stack moves).
	lent [2][]byte
	// eager: a Broadcast of shmEagerMin to shmEagerMax bytes returns on
	// its root once the data is in the segment (shm_eager.go), agreed
	// where some rank has no CPU of its own; owed the steps of the last
	// one whose receivers' posts the root has yet to check.
	eager bool
	owed  owedSteps
	// readsOnly: the operation under way writes nothing into this rank's
	// buffers (a barrier, a Broadcast's receiver); spared[b]: the last
	// step on buffer b wrote nothing into it (begin).
	readsOnly bool
	spared    [2]bool
}

// Spin budgets of a wait before it sleeps. With a CPU for every rank, the
// rank waited for is normally running and about to post: spin as MPI does,
// for as long as a chunk's copy and reduction take. With more ranks than
// CPUs, or once the rank waited for is seen to have last run on this very
// CPU (so it is not running: this rank is), sleep almost at once, which
// hands the CPU over at the cost of a wake-up.
const (
	shmSpinAlone  = time.Millisecond
	shmSpinShared = 2 * time.Microsecond
	// shmSleepMax bounds one sleep: a waiting rank checks at least this
	// often that the group and the rank it waits for are alive.
	shmSleepMax = time.Millisecond
	// shmMoveEvery bounds how often a waiting rank moves to another CPU.
	shmMoveEvery = time.Millisecond
	// shmYieldPeer is how long a wait for a peer process yields the CPU
	// after spinning, before it sleeps, where there are more ranks than
	// CPUs (nextWait). 4 ranks on 2 CPUs under
	// other load, 4 KiB, 3 rounds each: broadcast 17-19 us against 34-69
	// sleeping at once, allgather 34-47 against 49-127; 256 KiB the same
	// within the rounds' scatter at 50 us, worse in some rounds at 100 us
	// and more (the yielding ranks take CPU from the working ones).
	shmYieldPeer = 50 * time.Microsecond
	// shmYieldBelow is the size a rank below which an operation's waits
	// yield (nextWait).
	shmYieldBelow = 64 << 10
)

// newShmTeam lays a team over seg, which has layoutFor(n).size bytes.
func newShmTeam(seg []byte, n, me int) *shmTeam {
	l := layoutFor(n)
	t := &shmTeam{seg: seg, n: n, me: me, groupSize: n, ctrl: make([]*shmCtrl, n), bufs: make([][2][]byte, n), sleeps: make([]bool, n)}
	t.sleepMax = int64(shmSleepMax)
	t.spin, t.spreads = cpuPolicy(n)
	for q := range n {
		t.ctrl[q] = (*shmCtrl)(unsafe.Pointer(&seg[l.ctrlOff+q*shmCtrlSize]))
		for b := range 2 {
			off := l.dataOff + (q*2+b)*shmChunk
			t.bufs[q][b] = seg[off : off+shmChunk : off+shmChunk]
		}
	}
	return t
}

// cpuPolicy is how the waits of a team go where ranks processes share
// this kernel's CPUs (the team's, and those of any other rank on the same
// machine, such as a group's "hosts" in containers or network namespaces
// of one machine): spin 1 ms and move off a peer's CPU when each has a CPU
// of its own, else spin briefly (RDMA_COLL_SPIN sets the spin).
func cpuPolicy(ranks int) (spin int64, spreads bool) {
	spin = int64(shmSpinShared)
	if ranks <= runtime.NumCPU() {
		spin, spreads = int64(shmSpinAlone), true
	}
	if d, err := time.ParseDuration(os.Getenv("RDMA_COLL_SPIN")); err == nil {
		spin = int64(d)
	}
	return spin, spreads
}

// rankOf is member q's rank in the group.
func (t *shmTeam) rankOf(q int) int {
	if t.ranks == nil {
		return q
	}
	return t.ranks[q]
}

// opWord packs an operation's header (all but step and length).
func opWord(h header) uint64 {
	return uint64(h.seq)<<32 | uint64(h.kind)<<24 | uint64(h.arg)<<16 | uint64(h.root)
}

func headerOf(step, op, nbytes uint64) header {
	return header{seq: uint32(op >> 32), kind: kind(op >> 24), arg: uint8(op >> 16), root: uint16(op),
		tag: uint32(step), len: uint32(nbytes)}
}

// begin opens the next step k: it waits until every rank has read this
// rank's buffer of step k-2, which k reuses, and checked its descriptor of
// step k-shmDescs, whose place k's takes; and returns the step and that
// buffer. Where step k-2 wrote nothing into the buffer, the wait is for
// step k-shmDescs alone: a rank woken late from a barrier then holds up
// no other rank's next step, only the one after (a Broadcast's root, 4
// ranks on 2 CPUs, waited here for the last rank the host woke).
func (t *shmTeam) begin(g *Group) (uint64, []byte, error) {
	if t.owed.to != 0 {
		if err := (eagerRoot{t}).settle(g); err != nil {
			return 0, nil, err
		}
	}
	t.step++
	k := t.step
	var since uint64
	switch {
	case k > 2 && !t.spared[k&1]:
		since = k - 2
	case k > shmDescs:
		since = k - shmDescs
	}
	if since > 0 {
		for q := range t.n {
			c := t.ctrl[q]
			if err := t.await(g, q, &c.readDone, &c.sleepRead, since); err != nil {
				return 0, nil, err
			}
		}
	}
	t.spared[k&1] = t.readsOnly
	return k, t.bufs[t.me][k&1], nil
}

// post publishes this rank's contribution to step k.
func (t *shmTeam) post(k, op, nbytes uint64) { t.postAt(k, op, nbytes, 0, 0) }

// postAt is post with addresses in this process for the peers to read
// from and to write into (shm_single.go).
func (t *shmTeam) postAt(k, op, nbytes, readAddr, writeAddr uint64) {
	c := t.ctrl[t.me]
	d := &c.desc[k%shmDescs]
	d[1].Store(op)
	d[2].Store(nbytes)
	d[3].Store(readAddr)
	d[4].Store(writeAddr)
	d[0].Store(k)
	c.posted.Store(k)
	if c.sleepPosted.Load() != 0 {
		futexWake(&c.posted)
	}
}

// waitAll waits until every rank has posted step k with the same
// descriptor.
func (t *shmTeam) waitAll(g *Group, k, op, nbytes uint64) error {
	for q := range t.n {
		if q == t.me {
			continue
		}
		if err := t.waitFor(g, q, k, op, nbytes); err != nil {
			return err
		}
	}
	return nil
}

// waitFor waits until rank q has posted step k, and checks its
// descriptor.
func (t *shmTeam) waitFor(g *Group, q int, k, op, nbytes uint64) error {
	c := t.ctrl[q]
	if err := t.await(g, q, &c.posted, &c.sleepPosted, k); err != nil {
		return err
	}
	return t.checkPosted(q, k, op, nbytes)
}

// checkPosted checks the descriptor rank q posted with step k, which it
// did. q cannot overwrite desc[k%shmDescs] before this rank has read step
// k (begin).
func (t *shmTeam) checkPosted(q int, k, op, nbytes uint64) error {
	d := &t.ctrl[q].desc[k%shmDescs]
	if gs, gop, gn := d[0].Load(), d[1].Load(), d[2].Load(); gs != k || gop != op || gn != nbytes {
		return &RankError{Rank: t.rankOf(q), Op: "frame", Err: &mismatchError{got: headerOf(gs, gop, gn), want: headerOf(k, op, nbytes)}}
	}
	return nil
}

// done says this rank has read step k.
func (t *shmTeam) done(k uint64) {
	c := t.ctrl[t.me]
	c.readDone.Store(k)
	if c.sleepRead.Load() != 0 {
		futexWake(&c.readDone)
	}
}

// await waits until rank q's counter word reaches want. It spins for
// t.spin (not at all once q is seen to have last run on this CPU), then
// sleeps on the word as a futex (sleepers counts the ranks asleep on it,
// so that q wakes them when it stores), at most shmSleepMax at a time.
// Ranks of this process are waited for by yielding instead of sleeping.
// Between rounds, the checks that end a wait that cannot succeed: this
// group failed (an error, Close, ctx), a peer failed, q closed or its
// process exited. (A peer that closed or exited after doing its part of
// the operation is no failure: it may well be done.)
func (t *shmTeam) await(g *Group, q int, word *atomic.Uint64, sleepers *atomic.Uint32, want uint64) error {
	if word.Load() >= want {
		return nil
	}
	sleeps := t.sleeps[q]
	var spinUntil int64
	// This rank's CPU is published while it waits, and only then: a stale
	// CPU read by a peer would make it move, or sleep, for nothing.
	defer t.ctrl[t.me].cpu.Store(0)
	for i := 1; ; i++ {
		if word.Load() >= want {
			return nil
		}
		if i&63 != 0 {
			continue
		}
		now := time.Now().UnixNano()
		if spinUntil == 0 {
			spinUntil = now + t.spin
		}
		if i&(64*64-1) == 64 && now < spinUntil && t.onSameCPU(q) {
			// q waits for this CPU. With a CPU per rank, move to another
			// one (at most every shmMoveEvery) and keep spinning there;
			// else hand this one over.
			if t.spreads && sleeps && now >= t.nextMove && moved() {
				t.nextMove = now + int64(shmMoveEvery)
			} else {
				spinUntil = now
			}
		}
		if err := t.check(g, q, now); err != nil {
			if word.Load() >= want && !g.failed.Load() {
				return nil // q did its part, then closed or exited
			}
			return err
		}
		switch t.nextWait(sleeps, now, spinUntil) {
		case waitSpin:
			if !sleeps {
				runtime.Gosched() // ranks of this process may need this P
			}
		case waitYield:
			osYield()
		case waitFutex:
			sleepers.Add(1)
			if v := word.Load(); v < want {
				futexWait(word, uint32(v), time.Duration(t.sleepMax))
			}
			sleepers.Add(^uint32(0))
		default:
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// How a wait goes on between its checks (nextWait).
type waitStep int

const (
	waitSpin  waitStep = iota // poll the word again
	waitYield                 // give the CPU to the threads queued on it, staying runnable
	waitFutex                 // sleep on the word until its owner stores (a peer process)
	waitNap                   // sleep a little (a rank of this process)
)

// expect sets how the waits of an operation that moves nbytes a rank go
// on (nextWait).
// It also marks the operation as one that writes into this rank's
// buffers (readsOnly), as all but a barrier and a Broadcast's receiver do.
func (t *shmTeam) expect(nbytes int) {
	t.yields = !t.spreads && nbytes < shmYieldBelow
	t.readsOnly = false
}

// nextWait is how a wait for a rank (of another process if sleeps) that
// spun until spinUntil goes on at now. With more ranks than CPUs, in an
// operation of less than shmYieldBelow a rank, after
// spinning it yields the CPU for a while before it sleeps: the rank it
// waits for is then often queued on this very CPU, and yielding hands the
// CPU over without a sleep's wake-up, which on a loaded host costs tens of
// microseconds more. Only for a while: a yielding rank competes for the
// CPU with the ranks doing the work, which in a larger operation take
// longer than the yields last and lose the CPU to them (4 ranks on 2 CPUs,
// 256 KiB Broadcast: 357-718 us yielding against 259-274 sleeping at once,
// 3 rounds). With a CPU per rank it sleeps at once: two ranks that yield to each other on one CPU stay there (a
// wake-up may place the sleeper on another CPU; 2 ranks, 4 KiB AllGather:
// 13 us a run in such rounds, against 1.3 us when each has its CPU).
func (t *shmTeam) nextWait(sleeps bool, now, spinUntil int64) waitStep {
	yieldFor := int64(shmYieldPeer)
	if !t.yields {
		yieldFor = 0
	}
	if !sleeps {
		yieldFor = int64(time.Millisecond)
	}
	switch {
	case now < spinUntil:
		return waitSpin
	case now-spinUntil < yieldFor:
		return waitYield
	case sleeps:
		return waitFutex
	}
	return waitNap
}

func moved() bool {
	_, _, ok := moveOffCPU()
	return ok
}

// onSameCPU says whether rank q last waited on the CPU this rank runs on
// (so q is not running now), and publishes this rank's CPU for the others.
func (t *shmTeam) onSameCPU(q int) bool {
	cpu, ok := currentCPU()
	if !ok {
		return false
	}
	t.ctrl[t.me].cpu.Store(cpu + 1)
	return t.ctrl[q].cpu.Load() == cpu+1
}

// check returns why a wait for rank q cannot succeed, if it cannot.
func (t *shmTeam) check(g *Group, q int, now int64) error {
	if g.failed.Load() {
		return ErrBroken // the group's error says why
	}
	if g.ctx != nil {
		select {
		case <-g.ctx.Done():
			return context.Cause(g.ctx)
		default:
		}
	}
	if err := t.peerState(q); err != nil {
		return err
	}
	if now >= t.nextLive {
		t.nextLive = now + int64(time.Millisecond)
		if t.live.dead(q) {
			return &RankError{Rank: t.rankOf(q), Op: "receive", Err: errors.New("its process exited")}
		}
	}
	return nil
}

// peerState returns the failure a peer left in its control block, or
// ErrClosed from rank waited, if any.
func (t *shmTeam) peerState(waited int) error {
	for q := range t.n {
		if q == t.me {
			continue
		}
		st := t.ctrl[q].state.Load()
		switch st & 0xff {
		case shmLive:
			continue
		case shmClosed:
			if q == waited {
				return &RankError{Rank: t.rankOf(q), Op: "receive", Err: ErrClosed}
			}
			continue
		}
		blamed := int(st >> 32)
		c := t.ctrl[q]
		n := min(int(c.textLen.Load()), shmTextMax)
		var text [shmTextMax]byte
		copy(text[:n], c.text[:n])
		if blamed >= t.groupSize {
			return &RankError{Rank: t.rankOf(q), Op: "frame", Err: fmt.Errorf("abort blames rank %d of a group of %d", blamed, t.groupSize)}
		}
		return &RankError{Rank: blamed, Op: "failed", Err: fmt.Errorf("reported by rank %d: %s", t.rankOf(q), text[:n])}
	}
	return nil
}

// abort tells the peers this rank failed, blaming rank blamed.
func (t *shmTeam) abort(blamed int, text string) {
	c := t.ctrl[t.me]
	if c.state.Load() != shmLive {
		return
	}
	n := copy(c.text[:], text)
	c.textLen.Store(uint64(n))
	c.state.Store(shmAborted | uint64(blamed)<<32)
	t.wakeAll()
}

// closed tells the peers this rank left the group.
func (t *shmTeam) closed() {
	t.ctrl[t.me].state.CompareAndSwap(shmLive, shmClosed)
	t.wakeAll()
}

// wakeAll wakes every rank asleep on this rank's words: it failed or left,
// which they should learn at once.
func (t *shmTeam) wakeAll() {
	c := t.ctrl[t.me]
	futexWake(&c.posted)
	futexWake(&c.readDone)
}

// Operations. Each moves its data in steps of at most shmChunk bytes per
// rank; a zero-length operation still takes one step, so that every rank
// runs the same steps.

func chunks(nbytes, per int) int { return max(1, (nbytes+per-1)/per) }

func (t *shmTeam) barrier(g *Group) error {
	t.expect(0)
	t.readsOnly = true
	op := opWord(g.cur)
	k, _, err := t.begin(g)
	if err != nil {
		return err
	}
	t.post(k, op, 0)
	if err := t.waitAll(g, k, op, 0); err != nil {
		return err
	}
	t.done(k)
	return nil
}

// chunkSteps runs an operation of nbytes a rank (the length every rank's
// descriptor carries) as steps of at most per bytes [lo, hi): in each,
// put fills this rank's buffer mine with its part, the step is posted and
// every rank's post awaited, then take reads what this rank needs from
// the ranks' buffers b (t.bufs[q][b]).
func (t *shmTeam) chunkSteps(g *Group, nbytes, per int, put func(mine []byte, lo, hi int), take func(b uint64, lo, hi int)) error {
	return t.chunkStepsFrom(g, -1, nbytes, per, put, take)
}

// chunkStepsFrom is chunkSteps where every rank but from needs only
// from's buffer (from -1: every rank needs every buffer): such a rank
// waits for from's post alone, while from still waits for every rank's
// and checks its descriptor. Each buffer is written again two steps later
// only once every rank said it read it (begin), whoever waited for whom.
func (t *shmTeam) chunkStepsFrom(g *Group, from, nbytes, per int, put func(mine []byte, lo, hi int), take func(b uint64, lo, hi int)) error {
	t.expect(nbytes)
	t.readsOnly = from >= 0 && t.me != from
	if t.readsOnly && (eagerRoot{t}).fits(nbytes) {
		// The root does not wait for this rank: it is running, or queued
		// for a CPU, copying the steps in. Yield to it rather than sleep.
		t.yields = true
	}
	op, nb := opWord(g.cur), uint64(nbytes)
	for i, steps := 0, chunks(nbytes, per); i < steps; i++ {
		lo := i * per
		hi := min(nbytes, lo+per)
		k, mine, err := t.begin(g)
		if err != nil {
			return err
		}
		put(mine, lo, hi)
		t.post(k, op, nb)
		if from >= 0 && t.me != from {
			err = t.waitFor(g, from, k, op, nb)
		} else {
			err = t.waitAll(g, k, op, nb)
		}
		if err != nil {
			return err
		}
		take(k&1, lo, hi)
		t.done(k)
	}
	return nil
}

func (t *shmTeam) broadcast(g *Group, root int, buf []byte) error {
	if e := (eagerRoot{t}); t.me == root && e.fits(len(buf)) {
		return e.broadcast(g, buf)
	}
	return t.chunkStepsFrom(g, root, len(buf), shmChunk, func(mine []byte, lo, hi int) {
		if t.me == root {
			copy(mine, buf[lo:hi])
		}
	}, func(b uint64, lo, hi int) {
		if t.me != root {
			copy(buf[lo:hi], t.bufs[root][b])
		}
	})
}

// reduceTo reduces send into recv at root, or at every rank (root -1):
// every rank copies its chunk into its buffer, then the ranks that want
// the result compute the whole chunk from the n buffers in rank order,
// into recv. Ranks and root are t's.
func (t *shmTeam) reduceTo(g *Group, root int, send, recv []byte) error {
	return t.chunkSteps(g, len(send), shmChunk, func(mine []byte, lo, hi int) {
		copy(mine, send[lo:hi])
	}, func(b uint64, lo, hi int) {
		if root >= 0 && t.me != root {
			return
		}
		c, dst := hi-lo, recv[lo:hi]
		g.red.fn3(dst, t.bufs[0][b][:c], t.bufs[1][b][:c], g.red.op)
		for q := 2; q < t.n; q++ {
			g.red.fn(dst, t.bufs[q][b][:c], g.red.op, false)
		}
	})
}

func (t *shmTeam) allGather(g *Group, send, recv []byte) error {
	return t.gather(g, -1, send, recv)
}

// gather: every rank posts its chunk, root collects (root -1: every rank,
// an all-gather).
func (t *shmTeam) gather(g *Group, root int, send, recv []byte) error {
	blk := len(send)
	return t.chunkSteps(g, blk, shmChunk, func(mine []byte, lo, hi int) {
		if t.me != root {
			copy(mine, send[lo:hi])
		}
	}, func(b uint64, lo, hi int) {
		if root >= 0 && t.me != root {
			return
		}
		for q := range t.n {
			if q != t.me {
				copy(recv[q*blk+lo:q*blk+hi], t.bufs[q][b])
			}
		}
	})
}

// allToAll: in each step a rank's buffer holds the next piece of every
// one of its blocks for the other ranks, side by side (slotOf); rank q
// takes its piece from each buffer. Scatter is the same with only the
// root's buffer used (root >= 0).
func (t *shmTeam) allToAll(g *Group, root int, send, recv []byte, blk int) error {
	n := t.n
	per := shmChunk / max(1, n-1) &^ 7
	return t.chunkSteps(g, blk, per, func(mine []byte, lo, hi int) {
		if root >= 0 && t.me != root {
			return
		}
		for j := range n {
			if j != t.me {
				s := slotOf(j, t.me) * per
				copy(mine[s:s+hi-lo], send[j*blk+lo:])
			}
		}
	}, func(b uint64, lo, hi int) {
		switch {
		case root < 0:
			for q := range n {
				if q != t.me {
					copy(recv[q*blk+lo:q*blk+hi], t.bufs[q][b][slotOf(t.me, q)*per:])
				}
			}
		case t.me != root:
			copy(recv[lo:hi], t.bufs[root][b][slotOf(t.me, root)*per:])
		}
	})
}

// slotOf is the place of rank to's piece in rank from's buffer during an
// all-to-all step: the ranks other than from, in order (from keeps its own
// block, so its buffer has n-1 pieces).
func slotOf(to, from int) int {
	if to > from {
		return to - 1
	}
	return to
}
