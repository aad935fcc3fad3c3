package collectives

import (
	"context"
	"unsafe"
)

// AllReduce combines send element-wise across all ranks with op and stores
// the result in recv on every rank (len(recv) == len(send), the same on every
// rank). recv may be send itself (in place). The result is bitwise identical
// on every rank.
func AllReduce[T Number](ctx context.Context, g *Group, send, recv []T, op Op) error {
	if err := g.begin(ctx, kindAllReduce, 0, typeArg[T](op)); err != nil {
		return err
	}
	if !op.valid() {
		return g.badArg("invalid op %v", op)
	}
	if len(send) != len(recv) {
		return g.badArg("len(send) = %d, len(recv) = %d: they must be equal", len(send), len(recv))
	}
	sb, rb := bytesOf(send), bytesOf(recv)
	if unsafe.SliceData(sb) != unsafe.SliceData(rb) {
		if overlap(sb, rb) {
			return g.badArg("send and recv overlap without being the same slice")
		}
		if g.shm == nil && g.hier == nil {
			copy(rb, sb)
		}
	}
	g.red = reducerFor[T](op)
	switch {
	case g.shm != nil && g.shm.singleReduce && len(sb)/g.shm.n >= shmSingleMin:
		return g.end(g.shm.copyOnce().allReduce(g, sb, rb))
	case g.shm != nil:
		return g.end(g.shm.reduceTo(g, -1, sb, rb))
	case g.hier != nil:
		return g.end(g.hier.allReduce(g, sb, rb))
	}
	return g.end(g.allReduce(rb))
}

// Reduce combines send element-wise across all ranks with op into root's
// recv (len(recv) == len(send); recv is used only at the root and may be
// send itself there).
func Reduce[T Number](ctx context.Context, g *Group, root int, send, recv []T, op Op) error {
	if err := g.begin(ctx, kindReduce, root, typeArg[T](op)); err != nil {
		return err
	}
	if err := checkRoot(root, g.size); err != nil {
		return g.end(err)
	}
	if !op.valid() {
		return g.badArg("invalid op %v", op)
	}
	g.red = reducerFor[T](op)
	sb := bytesOf(send)
	var work []byte
	if g.rank == root {
		if len(send) != len(recv) {
			return g.badArg("len(send) = %d, len(recv) = %d: they must be equal at the root", len(send), len(recv))
		}
		work = bytesOf(recv)
		if g.shm != nil {
			if unsafe.SliceData(sb) != unsafe.SliceData(work) && overlap(sb, work) {
				return g.badArg("send and recv overlap without being the same slice")
			}
			return g.end(g.shm.reduceTo(g, root, sb, work))
		}
		if unsafe.SliceData(sb) != unsafe.SliceData(work) {
			if overlap(sb, work) {
				return g.badArg("send and recv overlap without being the same slice")
			}
			copy(work, sb)
		}
	} else if g.shm != nil {
		return g.end(g.shm.reduceTo(g, root, sb, nil))
	} else {
		work = g.scratch(slotWork, len(sb))
		copy(work, sb)
	}
	return g.end(g.reduce(root, work))
}

func (g *Group) allReduce(buf []byte) error {
	n := g.size
	count := len(buf) / g.red.elem
	switch {
	case n == 1:
		return nil
	case len(buf) <= allReduceShort || count < n:
		return g.allReduceRecDoubling(buf)
	default:
		if err := g.reduceScatterRing(buf, 0); err != nil {
			return err
		}
		return g.allGatherRingOwned(buf, uint32(n))
	}
}

// allReduceRecDoubling: with p the largest power of two <= n and rem = n-p,
// ranks below 2*rem first fold pairwise (even into odd), the p remaining
// ranks run log2(p) rounds of exchange-and-combine, and the folded ranks get
// the result back. Both partners of a round compute lower ⊕ higher, so they
// stay bitwise equal.
func (g *Group) allReduceRecDoubling(buf []byte) error {
	n, r := g.size, g.rank
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	tmp := g.scratch(slotWork, len(buf))
	newRank := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := g.send(r+1, 0, buf); err != nil {
				return err
			}
			if err := g.waitSends(); err != nil {
				return err
			}
			newRank = -1
		} else {
			if err := g.recvReduce(r-1, 0, buf, true); err != nil {
				return err
			}
			newRank = r / 2
		}
	}
	if newRank >= 0 {
		step := uint32(1)
		for mask := 1; mask < p; mask <<= 1 {
			nd := newRank ^ mask
			dst := nd + rem
			if nd < rem {
				dst = nd*2 + 1
			}
			if err := g.exchange(dst, dst, step, buf, tmp); err != nil {
				return err
			}
			g.red.fn(buf, tmp, g.red.op, dst < r)
			step++
		}
	}
	if r < 2*rem {
		const tag = 1 << 16
		if r%2 == 0 {
			return g.recv(r+1, tag, buf)
		}
		if err := g.send(r-1, tag, buf); err != nil {
			return err
		}
		return g.waitSends()
	}
	return nil
}

// elemBlock is block i of buf split into n blocks of whole elements.
func elemBlock(buf []byte, e, n, i int) []byte {
	lo, hi := blockRange(len(buf)/e, n, i)
	return buf[lo*e : hi*e]
}

// reduceScatterRing: n-1 steps; in step s rank r passes its partial block
// r-s to the right and folds the block r-s-1 coming from the left into its
// own, frame by frame as it arrives. Afterwards rank r holds the complete
// block r+1, computed once, so every copy of it is the same.
func (g *Group) reduceScatterRing(buf []byte, tag0 uint32) error {
	n, r := g.size, g.rank
	right, left := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		tag := tag0 + uint32(s)
		if err := g.send(right, tag, elemBlock(buf, g.red.elem, n, mod(r-s, n))); err != nil {
			return err
		}
		if err := g.recvReduce(left, tag, elemBlock(buf, g.red.elem, n, mod(r-s-1, n)), true); err != nil {
			return err
		}
		if err := g.waitSends(); err != nil {
			return err
		}
	}
	return nil
}

// allGatherRingOwned circulates the blocks left by reduceScatterRing (rank
// r owns block r+1) so that every rank has all of them.
func (g *Group) allGatherRingOwned(buf []byte, tag0 uint32) error {
	n, r := g.size, g.rank
	right, left := mod(r+1, n), mod(r-1, n)
	for s := 0; s < n-1; s++ {
		err := g.exchange(right, left, tag0+uint32(s),
			elemBlock(buf, g.red.elem, n, mod(r+1-s, n)), elemBlock(buf, g.red.elem, n, mod(r-s, n)))
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *Group) reduce(root int, work []byte) error {
	n := g.size
	count := len(work) / g.red.elem
	switch {
	case n == 1:
		return nil
	case len(work) <= reduceShort || count < n:
		return g.reduceBinomial(root, work)
	default:
		// Reduce-scatter, then the root gathers the block each rank owns.
		if err := g.reduceScatterRing(work, 0); err != nil {
			return err
		}
		tag := uint32(n)
		if g.rank != root {
			if err := g.send(root, tag, elemBlock(work, g.red.elem, n, mod(g.rank+1, n))); err != nil {
				return err
			}
			return g.waitSends()
		}
		for q := 0; q < n; q++ {
			if q != root {
				if err := g.recv(q, tag, elemBlock(work, g.red.elem, n, mod(q+1, n))); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// reduceBinomial: in round k, relative rank v with bit k clear combines the
// partial result of v+2^k into its own (own values on the left), and v with
// bit k set hands its partial result to v-2^k and is done.
func (g *Group) reduceBinomial(root int, work []byte) error {
	n := g.size
	vr := mod(g.rank-root, n)
	step := uint32(0)
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			if err := g.send(mod(vr-mask+root, n), step, work); err != nil {
				return err
			}
			return g.waitSends()
		}
		if vr+mask < n {
			if err := g.recvReduce(mod(vr+mask+root, n), step, work, false); err != nil {
				return err
			}
		}
		step++
	}
	return nil
}
