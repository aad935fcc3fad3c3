package collectives

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const maxTestSize = 9

var (
	msgSizes   = []int{0, 1, 7, 1001}
	blockSizes = []int{0, 1, 7, 300, 1001}
)

// forSizes runs f on groups of every size up to maxTestSize, on both
// engines: over conns (net.Pipe) and through a same-host segment.
func forSizes(t *testing.T, f func(t *testing.T, gs []*Group)) {
	for _, engine := range engines {
		for n := 1; n <= maxTestSize; n++ {
			t.Run(name(engine, "/n=", n), func(t *testing.T) {
				f(t, newEngineGroups(t, n, engine))
			})
		}
	}
}

func TestBarrier(t *testing.T) {
	forSizes(t, func(t *testing.T, gs []*Group) {
		n := len(gs)
		var entered atomic.Int64
		for round := 1; round <= 4; round++ {
			mustAll(t, gs, func(g *Group) error {
				entered.Add(1)
				if err := g.Barrier(testCtx(t)); err != nil {
					return err
				}
				// Nobody leaves before everybody entered.
				if got := entered.Load(); got < int64(round*n) {
					t.Errorf("rank %d left round %d with %d entries", g.Rank(), round, got)
				}
				return nil
			})
		}
	})
}

func TestBroadcast(t *testing.T) {
	forSizes(t, func(t *testing.T, gs []*Group) {
		n := len(gs)
		sizes := append(append([]int{}, msgSizes...), bcastLong+13)
		for _, size := range sizes {
			for root := 0; root < n; root++ {
				if size > bcastLong && root != 0 && root != n-1 {
					continue
				}
				want := pattern(size, keyOf(root, size))
				got := make([][]byte, n)
				mustAll(t, gs, func(g *Group) error {
					buf := pattern(size, keyOf(99, g.Rank()))
					if g.Rank() == root {
						copy(buf, want)
					}
					got[g.Rank()] = buf
					return g.Broadcast(testCtx(t), root, buf)
				})
				for r := range got {
					require.True(t, bytes.Equal(want, got[r]), "size %d root %d rank %d", size, root, r)
				}
			}
		}
	})
}

func TestScatterGather(t *testing.T) {
	forSizes(t, func(t *testing.T, gs []*Group) {
		n := len(gs)
		for _, blk := range blockSizes {
			for root := 0; root < n; root++ {
				// Scatter.
				send := pattern(n*blk, keyOf(1, root, blk))
				got := make([][]byte, n)
				mustAll(t, gs, func(g *Group) error {
					var s []byte
					if g.Rank() == root {
						s = send
					}
					got[g.Rank()] = pattern(blk, 7)
					return g.Scatter(testCtx(t), root, s, got[g.Rank()])
				})
				for r := range got {
					require.Equal(t, send[r*blk:(r+1)*blk], got[r], "scatter blk %d root %d rank %d", blk, root, r)
				}
				// Gather.
				recv := pattern(n*blk, 5)
				mustAll(t, gs, func(g *Group) error {
					var rb []byte
					if g.Rank() == root {
						rb = recv
					}
					return g.Gather(testCtx(t), root, pattern(blk, keyOf(2, g.Rank(), blk)), rb)
				})
				for r := 0; r < n; r++ {
					require.Equal(t, pattern(blk, keyOf(2, r, blk)), recv[r*blk:(r+1)*blk], "gather blk %d root %d from %d", blk, root, r)
				}
			}
		}
	})
}

func TestAllGather(t *testing.T) {
	forSizes(t, func(t *testing.T, gs []*Group) {
		n := len(gs)
		for _, blk := range append(append([]int{}, blockSizes...), allGatherShort/2+3) {
			want := make([]byte, 0, n*blk)
			for r := 0; r < n; r++ {
				want = append(want, pattern(blk, keyOf(3, r, blk))...)
			}
			got := make([][]byte, n)
			mustAll(t, gs, func(g *Group) error {
				got[g.Rank()] = pattern(n*blk, 11)
				return g.AllGather(testCtx(t), pattern(blk, keyOf(3, g.Rank(), blk)), got[g.Rank()])
			})
			for r := range got {
				require.True(t, bytes.Equal(want, got[r]), "blk %d rank %d", blk, r)
			}
		}
	})
}

func TestAllToAll(t *testing.T) {
	forSizes(t, func(t *testing.T, gs []*Group) {
		n := len(gs)
		for _, blk := range blockSizes {
			sends := make([][]byte, n)
			for r := range sends {
				sends[r] = pattern(n*blk, keyOf(4, r, blk))
			}
			got := make([][]byte, n)
			mustAll(t, gs, func(g *Group) error {
				got[g.Rank()] = pattern(n*blk, 13)
				return g.AllToAll(testCtx(t), sends[g.Rank()], got[g.Rank()])
			})
			for r := 0; r < n; r++ {
				for j := 0; j < n; j++ {
					require.Equal(t, sends[j][r*blk:(r+1)*blk], got[r][j*blk:(j+1)*blk], "blk %d: rank %d's block from %d", blk, r, j)
				}
			}
		}
	})
}

func TestAllReduceAndReduce(t *testing.T) {
	forSizes(t, func(t *testing.T, gs []*Group) {
		counts := []int{0, 1, 7, 1001, 20011}
		t.Run("int32", func(t *testing.T) { checkReductions[int32](t, gs, counts) })
		t.Run("int64", func(t *testing.T) { checkReductions[int64](t, gs, counts) })
		t.Run("uint32", func(t *testing.T) { checkReductions[uint32](t, gs, counts) })
		t.Run("uint64", func(t *testing.T) { checkReductions[uint64](t, gs, counts) })
		t.Run("float32", func(t *testing.T) { checkReductions[float32](t, gs, counts) })
		t.Run("float64", func(t *testing.T) { checkReductions[float64](t, gs, counts) })
		t.Run("named", func(t *testing.T) { checkReductions[celsius](t, gs, counts) })
	})
}

type celsius float64

var allOps = []Op{Sum, Prod, Min, Max}

// checkReductions runs AllReduce and Reduce for every op and count and
// compares with a serial reduction in rank order.
func checkReductions[T Number](t *testing.T, gs []*Group, counts []int) {
	n := len(gs)
	for ci, count := range counts {
		for _, op := range allOps {
			in := make([][]T, n)
			for r := range in {
				in[r] = inputs[T](count, keyOf(5, r, count, int(op)))
			}
			want := serialReduce(in, op)

			out := make([][]T, n)
			mustAll(t, gs, func(g *Group) error {
				out[g.Rank()] = make([]T, count)
				return AllReduce(testCtx(t), g, in[g.Rank()], out[g.Rank()], op)
			})
			for r := range out {
				require.Equal(t, want, out[r], "AllReduce %v count %d rank %d", op, count, r)
			}

			// In place (the same code path for every count past the copy).
			if count <= 1001 {
				mustAll(t, gs, func(g *Group) error {
					b := append(make([]T, 0, count), in[g.Rank()]...)
					out[g.Rank()] = b
					return AllReduce(testCtx(t), g, b, b, op)
				})
				for r := range out {
					require.Equal(t, want, out[r], "AllReduce in place %v count %d rank %d", op, count, r)
				}
			}

			root := (ci + int(op)) % n
			var rootOut []T
			mustAll(t, gs, func(g *Group) error {
				var recv []T
				if g.Rank() == root {
					recv = make([]T, count)
					rootOut = recv
				}
				return Reduce(testCtx(t), g, root, in[g.Rank()], recv, op)
			})
			require.Equal(t, want, rootOut, "Reduce %v count %d root %d", op, count, root)
		}
	}
}

// inputs are exact in every order of evaluation: arbitrary bits for
// integers (wrap-around arithmetic is associative), and for floating point
// values whose sums and products of up to 9 terms are exactly representable.
func inputs[T Number](count int, key uint64) []T {
	floats := []float64{-2, -1, -0.5, 0.5, 1, 2}
	out := make([]T, count)
	one := T(1)
	isFloat := one/2 != 0
	for i := range out {
		x := splitmix64(key + uint64(i))
		if isFloat {
			out[i] = T(floats[x%uint64(len(floats))])
		} else {
			out[i] = T(x)
		}
	}
	return out
}

func serialReduce[T Number](in [][]T, op Op) []T {
	acc := append(make([]T, 0, len(in[0])), in[0]...)
	for _, v := range in[1:] {
		for i := range acc {
			switch op {
			case Sum:
				acc[i] += v[i]
			case Prod:
				acc[i] *= v[i]
			case Min:
				acc[i] = min(acc[i], v[i])
			case Max:
				acc[i] = max(acc[i], v[i])
			}
		}
	}
	return acc
}

// TestSequenceOfMixedOps interleaves operations on one group, as real
// programs do, over TCP.
func TestSequenceOfMixedOps(t *testing.T) {
	for _, n := range []int{3, 6} {
		gs := newGroups(t, n, tcpMesh)
		mustAll(t, gs, func(g *Group) error {
			ctx := testCtx(t)
			for i := 0; i < 20; i++ {
				if err := g.Barrier(ctx); err != nil {
					return err
				}
				v := []int64{int64(g.Rank() + i)}
				if err := AllReduce(ctx, g, v, v, Sum); err != nil {
					return err
				}
				if want := int64(n*(n-1)/2 + n*i); v[0] != want {
					t.Errorf("round %d: sum %d, want %d", i, v[0], want)
				}
				b := []byte{byte(g.Rank())}
				if err := g.Broadcast(ctx, i%n, b); err != nil {
					return err
				}
				if b[0] != byte(i%n) {
					t.Errorf("round %d: broadcast got %d", i, b[0])
				}
			}
			return nil
		})
	}
}

func TestSingleRank(t *testing.T) {
	g, err := NewGroup(0, []net.Conn{nil})
	require.NoError(t, err)
	defer g.Close()
	ctx := context.Background()
	require.NoError(t, g.Barrier(ctx))
	v := []float64{1.5, 2}
	out := make([]float64, 2)
	require.NoError(t, AllReduce(ctx, g, v, out, Prod))
	require.Equal(t, v, out)
	recv := make([]byte, 3)
	require.NoError(t, g.AllToAll(ctx, []byte("abc"), recv))
	require.Equal(t, []byte("abc"), recv)
}

// A root finishes its broadcasts long before the others start reading them;
// the frames wait in order, and each operation gets its own data.
func TestRanksRunAhead(t *testing.T) {
	const n, rounds = 3, 50
	gs := newGroups(t, n, tcpMesh)
	mustAll(t, gs, func(g *Group) error {
		if g.Rank() != 0 {
			time.Sleep(100 * time.Millisecond)
		}
		for i := 0; i < rounds; i++ {
			b := []byte{byte(i), 0}
			if g.Rank() != 0 {
				b[0] = 0xff
			}
			if err := g.Broadcast(testCtx(t), 0, b); err != nil {
				return err
			}
			if b[0] != byte(i) {
				t.Errorf("rank %d round %d got %d", g.Rank(), i, b[0])
			}
		}
		return nil
	})
}
