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
