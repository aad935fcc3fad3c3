package collectives

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// maxSize is the largest group: roots travel as uint16 in frame headers.
const maxSize = 1 << 16

// Scratch buffer slots; each grows to the largest size an operation needed
// and is then reused, so operations allocate nothing in steady state.
const (
	slotFrame = iota // one received frame awaiting reduction
	slotWork         // a working copy of the data
	slotPackA        // Bruck packing, send side
	slotPackB        // Bruck packing, receive side
	numSlots
)

// Group is one rank's handle on a set of ranks connected pairwise. It owns
// its conns: Close, and any failure, closes them.
//
// A Group's operations must be called by one goroutine at a time; Rank,
// Size, Err and Close may be called at any time.
type Group struct {
	rank, size int
	links      []*link // links[rank] == nil; nil for peers not connected

	quit      chan struct{} // closed by Close: stops the sending goroutines
	abortc    chan struct{} // closed by a failure: the senders send abortMsg
	abortMsg  []byte
	closeOnce sync.Once
	wg        sync.WaitGroup

	busy   atomic.Bool
	failed atomic.Bool
	mu     sync.Mutex
	err    error // first failure; set once

	// State of the running operation (operation goroutine only).
	seq     uint32
	cur     header
	curName string
	stop    func() bool
	ctx     context.Context // the operation's ctx, polled by the same-host engine's waits
	red     reducer
	scr     [numSlots][]uint64

	// shm is the same-host engine (shm.go), set by Join once every rank
	// shares a segment; nil: the operations run over the conns.
	shm     *shmTeam
	shmOnce sync.Once
	// hier is set instead when the group spans hosts and the ranks of
	// each host share a segment (hier.go).
	hier *hierarchy
}

// segmentOf is the team over this host's shared segment: the group's, or
// this host's part of it; nil if none.
func segmentOf(g *Group) *shmTeam {
	if g.shm != nil {
		return g.shm
	}
	if g.hier != nil {
		return g.hier.team
	}
	return nil
}

// NewGroup makes a Group of len(peers) ranks in which this process is rank
// rank. peers[i] is a reliable, ordered byte stream to rank i, and
// peers[rank] must be nil. A nil entry for another rank means "not
// connected": an operation whose algorithm needs that link fails saying so.
// The Group takes ownership of the conns.
//
// Every rank's conn to every other rank must carry only this Group's
// traffic, in both directions.
func NewGroup(rank int, peers []net.Conn) (*Group, error) {
	n := len(peers)
	if n == 0 || n > maxSize {
		return nil, fmt.Errorf("collectives: NewGroup: %d peers: the size of a group is 1 to %d", n, maxSize)
	}
	if rank < 0 || rank >= n {
		return nil, fmt.Errorf("collectives: NewGroup: rank %d out of range [0, %d)", rank, n)
	}
	if peers[rank] != nil {
		return nil, fmt.Errorf("collectives: NewGroup: peers[%d] is this rank itself and must be nil", rank)
	}
	if !littleEndian() {
		return nil, errors.New("collectives: NewGroup: this host is big-endian; elements travel in host byte order and only little-endian hosts are supported")
	}
	g := &Group{
		rank:   rank,
		size:   n,
		links:  make([]*link, n),
		quit:   make(chan struct{}),
		abortc: make(chan struct{}),
	}
	for i, c := range peers {
		if i == rank {
			continue
		}
		if c == nil {
			continue
		}
		g.links[i] = newLink(i, len(peers), c)
	}
	for _, l := range g.links {
		if l != nil {
			g.wg.Add(1)
			go l.sendLoop(g)
		}
	}
	return g, nil
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// Rank is this process's rank, in [0, Size()).
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks in the group.
func (g *Group) Size() int { return g.size }

// Err is nil while the Group is usable, and otherwise the failure that broke
// it (ErrClosed after Close).
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// closeLinger bounds how long Close waits for the peers to close their side.
const closeLinger = time.Second

// Close ends the Group and closes its conns. An operation running meanwhile
// fails with ErrClosed. Close is idempotent.
//
// On a Group that has not failed, Close is graceful where the conns support
// CloseWrite (rdma and TCP conns do): it half-closes every conn and waits,
// at most one second, until the peers close theirs. So the last operation's
// data reaches every rank even if this process exits right after Close, and
// no peer sees its last writes fail because this rank went away first. The
// ranks of a group normally close at about the same time; closing them one
// after another from one goroutine makes each Close wait out the delay.
func (g *Group) Close() error {
	g.mu.Lock()
	graceful := g.err == nil && !g.busy.Load()
	g.mu.Unlock()
	g.fail(ErrClosed, false, !graceful)
	g.closeOnce.Do(func() { close(g.quit) })
	g.wg.Wait()
	g.releaseShm()
	if graceful {
		g.linger()
	}
	for _, l := range g.links {
		if l != nil {
			_ = l.conn.Close()
		}
	}
	return nil
}

// linger half-closes every conn and reads (and drops) whatever arrives until
// the peer's EOF or closeLinger.
func (g *Group) linger() {
	deadline := time.Now().Add(closeLinger)
	var wg sync.WaitGroup
	for _, l := range g.links {
		if l == nil {
			continue
		}
		cw, ok := l.conn.(interface{ CloseWrite() error })
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.conn.SetDeadline(deadline) // a half-close may wait for flow control
			if cw.CloseWrite() != nil {
				return
			}
			var buf [512]byte
			for {
				if _, err := l.conn.Read(buf[:]); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// releaseShm unmaps the shared segment once no operation uses it: the
// group has failed or closed, so a running operation returns within a few
// microseconds. If one does not within shmReleaseWait (a caller stuck
// elsewhere), the mapping stays rather than being pulled from under it.
func (g *Group) releaseShm() {
	t := segmentOf(g)
	if t == nil {
		return
	}
	deadline := time.Now().Add(shmReleaseWait)
	for g.busy.Load() {
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
	g.shmOnce.Do(t.free)
}

const shmReleaseWait = 5 * time.Second

// abortGrace bounds how long a failing rank tries to finish the frame it is
// writing and to tell its peers why it fails.
const abortGrace = time.Second

// fail records the first failure. With notify (a failed operation), it wakes
// this rank's blocked reads, and each link's sender finishes the frame it is
// writing, sends an abort frame naming the rank to blame, and closes the conn,
// so that the peers fail too (naming the culprit) instead of waiting for a
// rank that will not answer. Without notify (Close) the conns are closed at
// once.
func (g *Group) fail(err error, notify, closeConns bool) {
	g.mu.Lock()
	first := g.err == nil
	if first {
		g.err = err
		g.failed.Store(true)
	}
	g.mu.Unlock()
	if !first {
		return
	}
	if t := segmentOf(g); t != nil && !notify {
		t.closed()
	}
	if !notify {
		if !closeConns {
			return
		}
		for _, l := range g.links {
			if l != nil {
				_ = l.conn.Close()
			}
		}
		return
	}
	blamed := g.rank
	var re *RankError
	if errors.As(err, &re) && re.Op != "link" {
		blamed = re.Rank
	}
	text := err.Error()
	if len(text) > abortTextMax {
		text = text[:abortTextMax]
	}
	if t := segmentOf(g); t != nil {
		t.abort(blamed, text)
	}
	msg := make([]byte, hdrLen+len(text))
	h := header{kind: kindAbort, root: uint16(blamed), len: uint32(len(text))}
	h.put(msg)
	copy(msg[hdrLen:], text)
	g.abortMsg = msg
	past, grace := time.Unix(1, 0), time.Now().Add(abortGrace)
	for _, l := range g.links {
		if l != nil {
			_ = l.conn.SetReadDeadline(past)
			_ = l.conn.SetWriteDeadline(grace)
		}
	}
	close(g.abortc)
}

// begin starts an operation: it checks the group is usable and idle, stamps
// the operation's header and arranges for ctx's cancellation to fail it.
func (g *Group) begin(ctx context.Context, k kind, root int, arg uint8) error {
	name := k.String()
	if !g.busy.CompareAndSwap(false, true) {
		return fmt.Errorf("collectives: %s: %w", name, ErrBusy)
	}
	if g.failed.Load() { // set with err, under mu
		g.busy.Store(false)
		return &brokenError{op: name, cause: g.Err()}
	}
	g.seq++
	g.cur = header{seq: g.seq, kind: k, arg: arg, root: uint16(root)}
	g.curName = name
	if err := ctx.Err(); err != nil {
		// The peers are (or will be) waiting for this rank: failing, which
		// closes the conns, is what releases them.
		return g.end(context.Cause(ctx))
	}
	switch {
	case ctx.Done() == nil:
	case g.shm != nil:
		// The same-host engine's waits poll ctx (shmTeam.check): no
		// callback to register and remove, which costs two allocations
		// and a lock per operation.
		g.ctx = ctx
	default:
		g.stop = context.AfterFunc(ctx, func() { g.fail(context.Cause(ctx), true, true) })
	}
	return nil
}

// end finishes the operation started by begin. On failure it breaks the
// group and waits until no sending goroutine uses the caller's buffers.
func (g *Group) end(err error) error {
	g.ctx = nil
	if g.stop != nil {
		if !g.stop() {
			// ctx fired during the operation: the group is (being) failed.
			if err == nil {
				err = context.Canceled
			}
			g.fail(err, true, true)
		}
		g.stop = nil
	}
	if err != nil {
		var re *RankError
		if errors.As(err, &re) && re.Op == "send" && g.links[re.Rank] != nil && !g.failed.Load() {
			err = g.links[re.Rank].explain(err)
		}
		g.fail(err, true, true)
		g.drainSends()
		err = &opError{op: g.curName, cause: g.Err()}
	}
	g.busy.Store(false)
	return err
}

// badArg fails the operation for an argument error. The group breaks like
// for any other failure: the peers are already committed to the operation.
func (g *Group) badArg(format string, args ...any) error {
	return g.end(fmt.Errorf(format, args...))
}

func checkRoot(root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("root %d out of range [0, %d)", root, size)
	}
	return nil
}

func (g *Group) peer(p int) (*link, error) {
	if l := g.links[p]; l != nil {
		return l, nil
	}
	return nil, &RankError{Rank: p, Op: "link", Err: fmt.Errorf("rank %d has no conn to rank %d: %w", g.rank, p, ErrNotConnected)}
}

// send posts data to rank p; the link's goroutine writes it. data must not
// change until waitSends.
func (g *Group) send(p int, tag uint32, data []byte) error {
	l, err := g.peer(p)
	if err != nil {
		return err
	}
	if l.pending == maxPending {
		if err := g.waitOne(l); err != nil {
			return err
		}
	}
	h := g.cur
	h.tag = tag
	select {
	case l.sendq <- sendReq{h: h, data: data}:
		l.pending++
		return nil
	case <-g.quit:
		return ErrClosed
	}
}

func (g *Group) waitOne(l *link) error {
	select {
	case err := <-l.done:
		l.pending--
		return err
	case <-g.quit:
		return ErrClosed
	}
}

// waitSends waits until every posted send has been written.
func (g *Group) waitSends() error {
	for _, l := range g.links {
		if l == nil {
			continue
		}
		for l.pending > 0 {
			if err := g.waitOne(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// drainSends waits out the posted sends after a failure (the conns are
// closed, so they end quickly), or until Close.
func (g *Group) drainSends() {
	for _, l := range g.links {
		if l == nil {
			continue
		}
		for l.pending > 0 {
			if g.waitOne(l) == ErrClosed {
				return
			}
		}
	}
}

// recv receives exactly len(dst) bytes from rank p.
func (g *Group) recv(p int, tag uint32, dst []byte) error {
	l, err := g.peer(p)
	if err != nil {
		return err
	}
	h := g.cur
	h.tag = tag
	for {
		n := min(len(dst), frameMax)
		h.len = uint32(n)
		if err := l.readHeader(&h); err != nil {
			return err
		}
		if err := l.readPayload(dst[:n]); err != nil {
			return err
		}
		dst = dst[n:]
		if len(dst) == 0 {
			return nil
		}
	}
}

// recvReduce receives len(dst) bytes from rank p and combines them into dst
// frame by frame with g.red; srcFirst puts the received values on the left
// of the operator.
func (g *Group) recvReduce(p int, tag uint32, dst []byte, srcFirst bool) error {
	l, err := g.peer(p)
	if err != nil {
		return err
	}
	h := g.cur
	h.tag = tag
	buf := g.scratch(slotFrame, min(len(dst), reducePiece))
	for {
		n := min(len(dst), frameMax)
		h.len = uint32(n)
		if err := l.readHeader(&h); err != nil {
			return err
		}
		for off := 0; off < n; off += reducePiece {
			m := min(n-off, reducePiece)
			if err := l.readPayload(buf[:m]); err != nil {
				return err
			}
			g.red.fn(dst[off:off+m], buf[:m], g.red.op, srcFirst)
		}
		dst = dst[n:]
		if len(dst) == 0 {
			return nil
		}
	}
}

// exchange sends out to rank to while receiving in from rank from, then
// waits for the send: one step of most algorithms.
func (g *Group) exchange(to, from int, tag uint32, out, in []byte) error {
	if err := g.send(to, tag, out); err != nil {
		return err
	}
	if err := g.recv(from, tag, in); err != nil {
		return err
	}
	return g.waitSends()
}

// scratch returns an 8-byte aligned buffer of n bytes from slot, reused
// across operations.
func (g *Group) scratch(slot, n int) []byte {
	words := (n + 7) / 8
	if cap(g.scr[slot]) < words {
		g.scr[slot] = make([]uint64, words)
	}
	s := g.scr[slot][:words]
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), n)
}
