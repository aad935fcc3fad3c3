package collectives

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

// One-MiB messages, over TCP and through the segment, for a few group sizes.
func TestLargeMessages(t *testing.T) {
	// tcp: the conns over kernel TCP; shm: the same-host segment, where
	// 1 MiB takes several steps of a chunk each.
	for _, engine := range []string{"tcp", "shm"} {
		for _, n := range []int{2, 3, 8} {
			t.Run(name(engine, "/n=", n), func(t *testing.T) { checkLargeMessages(t, engine, n) })
		}
	}
}

func checkLargeMessages(t *testing.T, engine string, n int) {
	checkOperations(t, newEngineGroups(t, n, engine), mib)
}

// checkOperations runs every operation with size bytes a rank (or about
// that) on gs, and checks every rank's result: Broadcast, AllReduce,
// Reduce, AllGather, AllToAll, Scatter and Gather.
func checkOperations(t *testing.T, gs []*Group, size int) {
	n := len(gs)
	ctx := testCtx(t)

	// Broadcast.
	want := pattern(size, keyOf(6, n))
	got := make([][]byte, n)
	mustAll(t, gs, func(g *Group) error {
		got[g.Rank()] = make([]byte, size)
		if g.Rank() == n-1 {
			copy(got[g.Rank()], want)
		}
		return g.Broadcast(ctx, n-1, got[g.Rank()])
	})
	for r := range got {
		require.True(t, bytes.Equal(want, got[r]), "broadcast rank %d", r)
	}

	// AllReduce and Reduce, float64 Sum and int32 Max.
	counts := size / 8
	in := make([][]float64, n)
	for r := range in {
		in[r] = inputs[float64](counts, keyOf(7, r))
	}
	wantF := serialReduce(in, Sum)
	outF := make([][]float64, n)
	mustAll(t, gs, func(g *Group) error {
		outF[g.Rank()] = make([]float64, counts)
		return AllReduce(ctx, g, in[g.Rank()], outF[g.Rank()], Sum)
	})
	for r := range outF {
		require.Equal(t, wantF, outF[r], "allreduce rank %d", r)
	}
	inI := make([][]int32, n)
	for r := range inI {
		inI[r] = inputs[int32](size/4+1, keyOf(8, r))
	}
	wantI := serialReduce(inI, Max)
	outI := make([]int32, size/4+1)
	mustAll(t, gs, func(g *Group) error {
		var recv []int32
		if g.Rank() == 1 {
			recv = outI
		}
		return Reduce(ctx, g, 1, inI[g.Rank()], recv, Max)
	})
	require.Equal(t, wantI, outI)

	// AllGather and AllToAll of size-byte results.
	blk := size / n
	agWant := make([]byte, 0, n*blk)
	for r := 0; r < n; r++ {
		agWant = append(agWant, pattern(blk, keyOf(9, r))...)
	}
	a2aSend := make([][]byte, n)
	for r := range a2aSend {
		a2aSend[r] = pattern(n*blk, keyOf(10, r))
	}
	agGot, a2aGot := make([][]byte, n), make([][]byte, n)
	mustAll(t, gs, func(g *Group) error {
		r := g.Rank()
		agGot[r] = make([]byte, n*blk)
		if err := g.AllGather(ctx, pattern(blk, keyOf(9, r)), agGot[r]); err != nil {
			return err
		}
		a2aGot[r] = make([]byte, n*blk)
		return g.AllToAll(ctx, a2aSend[r], a2aGot[r])
	})
	for r := 0; r < n; r++ {
		require.True(t, bytes.Equal(agWant, agGot[r]), "allgather rank %d", r)
		for j := 0; j < n; j++ {
			require.True(t, bytes.Equal(a2aSend[j][r*blk:(r+1)*blk], a2aGot[r][j*blk:(j+1)*blk]), "alltoall rank %d from %d", r, j)
		}
	}

	// Scatter and Gather of size bytes at the root.
	sc := pattern(n*blk, keyOf(11, n))
	scGot := make([][]byte, n)
	mustAll(t, gs, func(g *Group) error {
		scGot[g.Rank()] = make([]byte, blk)
		return g.Scatter(ctx, 0, sc, scGot[g.Rank()])
	})
	gaGot := make([]byte, n*blk)
	mustAll(t, gs, func(g *Group) error {
		var recv []byte
		if g.Rank() == 0 {
			recv = gaGot
		}
		return g.Gather(ctx, 0, scGot[g.Rank()], recv)
	})
	require.True(t, bytes.Equal(sc, gaGot), "scatter then gather")
}

// With values whose sums depend on the order of evaluation, every rank
// still gets bitwise the same result, close to the serial one.
func TestFloatResultsBitwiseIdentical(t *testing.T) {
	for _, n := range []int{3, 5, 8} {
		gs := newGroups(t, n, pipeMesh)
		for _, count := range []int{1001, 50001} {
			in := make([][]float64, n)
			in32 := make([][]float32, n)
			for r := range in {
				in[r] = make([]float64, count)
				in32[r] = make([]float32, count)
				for i := range in[r] {
					x := splitmix64(keyOf(12, r, i))
					in[r][i] = (float64(x>>11)/(1<<53) - 0.5) * math.Pow(10, float64(x%7))
					in32[r][i] = float32(in[r][i])
				}
			}
			want := serialReduce(in, Sum)
			out := make([][]float64, n)
			out32 := make([][]float32, n)
			mustAll(t, gs, func(g *Group) error {
				r := g.Rank()
				out[r] = make([]float64, count)
				if err := AllReduce(testCtx(t), g, in[r], out[r], Sum); err != nil {
					return err
				}
				out32[r] = make([]float32, count)
				return AllReduce(testCtx(t), g, in32[r], out32[r], Sum)
			})
			for r := 1; r < n; r++ {
				require.True(t, bytes.Equal(bytesOf(out[0]), bytesOf(out[r])), "n %d count %d: float64 rank %d differs from rank 0", n, count, r)
				require.True(t, bytes.Equal(bytesOf(out32[0]), bytesOf(out32[r])), "n %d count %d: float32 rank %d differs from rank 0", n, count, r)
			}
			for i := range want {
				require.InDelta(t, want[i], out[0][i], 1e-6, "element %d", i)
			}
		}
	}
}
