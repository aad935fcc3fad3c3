package collectives

import (
	"context"
	"unsafe"
)

// Algorithm switch points, in bytes.
const (
	bcastLong      = 128 << 10 // Broadcast: scatter + ring all-gather from here (n > 2)
	allReduceShort = 64 << 10  // AllReduce: recursive doubling up to here
	reduceShort    = 64 << 10  // Reduce: binomial tree up to here
	allGatherShort = 64 << 10  // AllGather: Bruck while the result is this small
	bruckBlockMax  = 256       // AllToAll: Bruck for blocks this small (n >= 4)
)

// blockRange splits count items into n nearly equal blocks and returns
// block i's bounds; both ends of every link compute the same split.
func blockRange(count, n, i int) (lo, hi int) {
	base, rem := count/n, count%n
	lo = i*base + min(i, rem)
	hi = lo + base
	if i < rem {
		hi++
	}
	return lo, hi
}

// overlap reports whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0 := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

func mod(a, n int) int { return ((a % n) + n) % n }

// Barrier returns once every rank of the group has called it
// (dissemination algorithm: ceil(log2 n) rounds of empty messages).
func (g *Group) Barrier(ctx context.Context) error {
	if err := g.begin(ctx, kindBarrier, 0, 0); err != nil {
		return err
	}
	if g.shm != nil {
		return g.end(g.shm.barrier(g))
	}
	return g.end(g.barrier())
}

func (g *Group) barrier() error {
	n, r := g.size, g.rank
	for k, step := 1, uint32(0); k < n; k, step = k<<1, step+1 {
		if err := g.exchange(mod(r+k, n), mod(r-k, n), step, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// Broadcast copies root's buf into buf on every other rank. len(buf) must be
// the same on every rank.
func (g *Group) Broadcast(ctx context.Context, root int, buf []byte) error {
	if err := g.begin(ctx, kindBroadcast, root, 0); err != nil {
		return err
	}
	if err := checkRoot(root, g.size); err != nil {
		return g.end(err)
	}
	if t := g.shm; t != nil {
		if t.single && len(buf) >= shmSingleMin && !(eagerRoot{t}).fits(len(buf)) {
			return g.end(t.copyOnce().broadcast(g, root, buf))
		}
		return g.end(t.broadcast(g, root, buf))
	}
	if h := g.hier; h != nil && h.split && len(buf)/h.team.n >= shmSingleMin {
		return g.end(h.broadcast(g, root, buf))
	}
	return g.end(g.broadcast(root, buf))
}

func (g *Group) broadcast(root int, buf []byte) error {
	switch n := g.size; {
	case n == 1:
		return nil
	case len(buf) >= bcastLong && n > 2:
		return g.bcastScatterRing(root, buf)
	default:
		return g.bcastBinomial(root, buf)
	}
}

// bcastBinomial: ceil(log2 n) rounds; in each, every rank that has the data
// sends it to one that has not.
func (g *Group) bcastBinomial(root int, buf []byte) error {
	n := g.size
	vr := mod(g.rank-root, n)
	mask := 1
	for ; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			if err := g.recv(mod(vr-mask+root, n), 0, buf); err != nil {
				return err
			}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			if err := g.send(mod(vr+mask+root, n), 0, buf); err != nil {
				return err
			}
		}
	}
	return g.waitSends()
}

// bcastScatterRing: the root scatters n blocks, then a ring all-gather
// completes them; each rank sends and receives about 2(n-1)/n of the data.
func (g *Group) bcastScatterRing(root int, buf []byte) error {
	n := g.size
	vr := mod(g.rank-root, n)
	block := func(i int) []byte {
		lo, hi := blockRange(len(buf), n, i)
		return buf[lo:hi]
	}
	if vr == 0 {
		for i := 1; i < n; i++ {
			if err := g.send(mod(i+root, n), 0, block(i)); err != nil {
				return err
			}
		}
	} else if err := g.recv(root, 0, block(vr)); err != nil {
		return err
	}
	// The ring is cut at the root: it has every block, and receiving into
	// blocks it may still be sending would race with its own sends.
	right, left := mod(vr+1+root, n), mod(vr-1+root, n)
	for s := 0; s < n-1; s++ {
		tag := uint32(s + 1)
		if right != root {
			if err := g.send(right, tag, block(mod(vr-s, n))); err != nil {
				return err
			}
		}
		if vr != 0 {
			if err := g.recv(left, tag, block(mod(vr-s-1, n))); err != nil {
				return err
			}
		}
		if err := g.waitSends(); err != nil {
			return err
		}
	}
	return nil
}

// Scatter sends block i of root's send (len(send) == Size()*len(recv)) to
// rank i's recv. send is used only at the root.
func (g *Group) Scatter(ctx context.Context, root int, send, recv []byte) error {
	if err := g.begin(ctx, kindScatter, root, 0); err != nil {
		return err
	}
	if err := checkRoot(root, g.size); err != nil {
		return g.end(err)
	}
	blk := len(recv)
	if g.rank != root {
		if g.shm != nil {
			return g.end(g.shm.allToAll(g, root, nil, recv, blk))
		}
		return g.end(g.recv(root, 0, recv))
	}
	if len(send) != g.size*blk {
		return g.badArg("len(send) = %d, want Size()*len(recv) = %d", len(send), g.size*blk)
	}
	if overlap(send, recv) {
		return g.badArg("send and recv overlap")
	}
	for i := 0; i < g.size && g.shm == nil; i++ {
		if i != root {
			if err := g.send(i, 0, send[i*blk:(i+1)*blk]); err != nil {
				return g.end(err)
			}
		}
	}
	copy(recv, send[root*blk:(root+1)*blk])
	if g.shm != nil {
		return g.end(g.shm.allToAll(g, root, send, recv, blk))
	}
	return g.end(g.waitSends())
}

// Gather collects every rank's send into root's recv, rank i's at
// recv[i*len(send):]. recv is used only at the root.
func (g *Group) Gather(ctx context.Context, root int, send, recv []byte) error {
	if err := g.begin(ctx, kindGather, root, 0); err != nil {
		return err
	}
	if err := checkRoot(root, g.size); err != nil {
		return g.end(err)
	}
	blk := len(send)
	if g.rank != root {
		if g.shm != nil {
			return g.end(g.shm.gather(g, root, send, nil))
		}
		if err := g.send(root, 0, send); err != nil {
			return g.end(err)
		}
		return g.end(g.waitSends())
	}
	if len(recv) != g.size*blk {
		return g.badArg("len(recv) = %d, want Size()*len(send) = %d", len(recv), g.size*blk)
	}
	if overlap(send, recv) {
		return g.badArg("send and recv overlap")
	}
	copy(recv[root*blk:], send)
	if g.shm != nil {
		return g.end(g.shm.gather(g, root, send, recv))
	}
	for i := 0; i < g.size; i++ {
		if i != root {
			if err := g.recv(i, 0, recv[i*blk:(i+1)*blk]); err != nil {
				return g.end(err)
			}
		}
	}
	return g.end(nil)
}

// AllGather is Gather with every rank a root: recv (Size()*len(send) bytes)
// holds rank i's send at recv[i*len(send):] on every rank.
func (g *Group) AllGather(ctx context.Context, send, recv []byte) error {
	if err := g.begin(ctx, kindAllGather, 0, 0); err != nil {
		return err
	}
	n, r, blk := g.size, g.rank, len(send)
	if len(recv) != n*blk {
		return g.badArg("len(recv) = %d, want Size()*len(send) = %d", len(recv), n*blk)
	}
	if overlap(send, recv) {
		return g.badArg("send and recv overlap")
	}
	copy(recv[r*blk:], send)
	switch {
	case n == 1:
		return g.end(nil)
	case g.shm != nil && g.shm.single && blk >= shmSingleMin:
		return g.end(g.shm.copyOnce().allGather(g, send, recv))
	case g.shm != nil:
		return g.end(g.shm.allGather(g, send, recv))
	case g.hier != nil && g.hier.split && blk >= shmSingleMin:
		return g.end(g.hier.allGather(g, recv, blk))
	case n*blk <= allGatherShort:
		return g.end(g.allGatherBruck(send, recv))
	default:
		return g.end(g.allGatherRing(recv, blk))
	}
}

// allGatherBruck: round k receives 2^k blocks from rank r+2^k, so that
// after ceil(log2 n) rounds tmp[i] is rank r+i's block.
func (g *Group) allGatherBruck(send, recv []byte) error {
	n, r, blk := g.size, g.rank, len(send)
	tmp := g.scratch(slotWork, n*blk)
	copy(tmp, send)
	step := uint32(0)
	for k := 1; k < n; k <<= 1 {
		m := min(k, n-k)
		if err := g.send(mod(r-k, n), step, tmp[:m*blk]); err != nil {
			return err
		}
		if err := g.recv(mod(r+k, n), step, tmp[k*blk:(k+m)*blk]); err != nil {
			return err
		}
		if err := g.waitSends(); err != nil {
			return err
		}
		step++
	}
	for i := 1; i < n; i++ {
		j := mod(r+i, n)
		copy(recv[j*blk:(j+1)*blk], tmp[i*blk:(i+1)*blk])
	}
	return nil
}

// allGatherRing: n-1 steps, each passing one block to the right.
func (g *Group) allGatherRing(recv []byte, blk int) error {
	n, r := g.size, g.rank
	right, left := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		sb, rb := mod(r-s, n), mod(r-s-1, n)
		if err := g.exchange(right, left, uint32(s), recv[sb*blk:(sb+1)*blk], recv[rb*blk:(rb+1)*blk]); err != nil {
			return err
		}
	}
	return nil
}

// AllToAll sends block j of send to rank j, which stores it as block i of
// its recv (i being this rank). len(send) == len(recv) == Size()*block.
func (g *Group) AllToAll(ctx context.Context, send, recv []byte) error {
	if err := g.begin(ctx, kindAllToAll, 0, 0); err != nil {
		return err
	}
	n, r := g.size, g.rank
	if len(send) != len(recv) || len(send)%n != 0 {
		return g.badArg("len(send) = %d, len(recv) = %d: both must be Size()*block = %d*block", len(send), len(recv), n)
	}
	if overlap(send, recv) {
		return g.badArg("send and recv overlap")
	}
	blk := len(send) / n
	copy(recv[r*blk:(r+1)*blk], send[r*blk:(r+1)*blk])
	switch {
	case n == 1:
		return g.end(nil)
	case g.shm != nil && g.shm.single && blk >= shmSingleMin:
		return g.end(g.shm.copyOnce().allToAll(g, send, recv, blk))
	case g.shm != nil:
		return g.end(g.shm.allToAll(g, -1, send, recv, blk))
	case g.hier != nil && g.hier.split && blk >= shmSingleMin:
		return g.end(g.hier.allToAll(g, send, recv, blk))
	case blk <= bruckBlockMax && n >= 4:
		return g.end(g.allToAllBruck(send, recv, blk))
	default:
		return g.end(g.allToAllPairwise(send, recv, blk))
	}
}

// allToAllPairwise: in step k rank r sends to r+k and receives from r-k.
// All sends are posted at once (each link has its own writer) and the
// receives follow the pairwise order, so every link is busy.
func (g *Group) allToAllPairwise(send, recv []byte, blk int) error {
	n, r := g.size, g.rank
	for k := 1; k < n; k++ {
		to := mod(r+k, n)
		if err := g.send(to, 0, send[to*blk:(to+1)*blk]); err != nil {
			return err
		}
	}
	for k := 1; k < n; k++ {
		from := mod(r-k, n)
		if err := g.recv(from, 0, recv[from*blk:(from+1)*blk]); err != nil {
			return err
		}
	}
	return g.waitSends()
}

// allToAllBruck: rotate, then in round k send every block whose index has
// bit k set to rank r+2^k, then rotate back: ceil(log2 n) messages per rank
// instead of n-1, at the price of moving each block several times.
func (g *Group) allToAllBruck(send, recv []byte, blk int) error {
	n, r := g.size, g.rank
	tmp := g.scratch(slotWork, n*blk)
	for i := 0; i < n; i++ {
		j := mod(r+i, n)
		copy(tmp[i*blk:(i+1)*blk], send[j*blk:(j+1)*blk])
	}
	pa := g.scratch(slotPackA, (n+1)/2*blk)
	pb := g.scratch(slotPackB, (n+1)/2*blk)
	step := uint32(0)
	for k := 1; k < n; k <<= 1 {
		m := 0
		for i := k; i < n; i++ {
			if i&k != 0 {
				copy(pa[m*blk:(m+1)*blk], tmp[i*blk:(i+1)*blk])
				m++
			}
		}
		if err := g.exchange(mod(r+k, n), mod(r-k, n), step, pa[:m*blk], pb[:m*blk]); err != nil {
			return err
		}
		m = 0
		for i := k; i < n; i++ {
			if i&k != 0 {
				copy(tmp[i*blk:(i+1)*blk], pb[m*blk:(m+1)*blk])
				m++
			}
		}
		step++
	}
	for i := 1; i < n; i++ {
		j := mod(r-i, n)
		copy(recv[j*blk:(j+1)*blk], tmp[i*blk:(i+1)*blk])
	}
	return nil
}
