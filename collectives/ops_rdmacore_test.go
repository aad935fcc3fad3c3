package collectives

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// Every operation over real verbs, on both engines: the conns alone
// ("stream", the path between hosts) and the same-host segment ("shm"),
// small and large, every rank's result checked. Runs in the Soft-RoCE VM
// (scripts/softroce-test.sh runs the package's RDMACore tests there).
func TestOperationsRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	cfg := &rdma.Config{Provider: "rdmacore"}
	const n = 4
	for _, engine := range []string{"stream", "shm"} {
		t.Run(engine, func(t *testing.T) {
			t.Setenv(AlgoEnv, engine)
			gs := joinAllAt(t, n, freeAddr(t, ip), func(ctx context.Context, rank int, root string) (*Group, error) {
				b := Bootstrap{Config: cfg, LocalAddr: ip}
				return b.Join(ctx, rank, n, root)
			})
			for _, g := range gs {
				require.Equal(t, engine == "shm", segmentOf(g) != nil, "rank %d's engine", g.Rank())
			}
			for _, size := range []int{1001, 1<<20 + 7} {
				checkOperations(t, gs, size)
			}
		})
	}
}

// checkOperations runs Broadcast, AllGather, AllToAll and AllReduce of
// about size bytes a rank on gs and checks every rank's result.
func checkOperations(t *testing.T, gs []*Group, size int) {
	n := len(gs)
	ctx := testCtx(t)

	want := pattern(size, keyOf(1, size))
	bufs := make([][]byte, n)
	mustAll(t, gs, func(g *Group) error {
		bufs[g.Rank()] = make([]byte, size)
		if g.Rank() == n-1 {
			copy(bufs[g.Rank()], want)
		}
		return g.Broadcast(ctx, n-1, bufs[g.Rank()])
	})
	for r := range bufs {
		require.Equal(t, want, bufs[r], "broadcast of %d bytes, rank %d", size, r)
	}

	block := size / n
	sends := make([][]byte, n)
	for r := range sends {
		sends[r] = pattern(block, keyOf(2, r, size))
	}
	gathered := make([][]byte, n)
	mustAll(t, gs, func(g *Group) error {
		gathered[g.Rank()] = make([]byte, n*block)
		return g.AllGather(ctx, sends[g.Rank()], gathered[g.Rank()])
	})
	for r := range gathered {
		for from := range sends {
			require.Equal(t, sends[from], gathered[r][from*block:(from+1)*block], "allgather, rank %d's block from %d", r, from)
		}
	}

	alls := make([][]byte, n)
	for r := range alls {
		alls[r] = pattern(n*block, keyOf(3, r, size))
	}
	got := make([][]byte, n)
	mustAll(t, gs, func(g *Group) error {
		got[g.Rank()] = make([]byte, n*block)
		return g.AllToAll(ctx, alls[g.Rank()], got[g.Rank()])
	})
	for r := range got {
		for from := range alls {
			require.Equal(t, alls[from][r*block:(r+1)*block], got[r][from*block:(from+1)*block], "alltoall, rank %d's block from %d", r, from)
		}
	}

	in := make([][]float32, n)
	for r := range in {
		in[r] = inputs[float32](size/4, keyOf(4, r, size))
	}
	sum := serialReduce(in, Sum)
	out := make([][]float32, n)
	mustAll(t, gs, func(g *Group) error {
		out[g.Rank()] = make([]float32, len(sum))
		return AllReduce(ctx, g, in[g.Rank()], out[g.Rank()], Sum)
	})
	for r := range out {
		require.Equal(t, sum, out[r], "allreduce of %d floats, rank %d", len(sum), r)
	}
}
