package collectives

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Every operation over soft's conns on both of its paths, shared memory
// and TCP, and on both engines (TestOperationsRDMACore does the same over
// real verbs in the Soft-RoCE VM).
func TestOperationsSoftPaths(t *testing.T) {
	cfg := &rdma.Config{Provider: rdma.ProviderSoft}
	const n = 4
	for _, path := range []string{"soft-shm", "soft-tcp"} {
		for _, engine := range []string{"stream", "shm"} {
			t.Run(path+"/"+engine, func(t *testing.T) {
				prev := soft.SetSharedMemory(path == "soft-shm")
				defer soft.SetSharedMemory(prev)
				t.Setenv(AlgoEnv, engine)
				gs := joinAllAt(t, n, freeAddr(t, "127.0.0.1"), func(ctx context.Context, rank int, root string) (*Group, error) {
					b := Bootstrap{Config: cfg}
					return b.Join(ctx, rank, n, root)
				})
				for _, g := range gs {
					require.Equal(t, engine == "shm", segmentOf(g) != nil, "rank %d's engine", g.Rank())
				}
				for _, size := range []int{1001, 1<<20 + 7} {
					checkOperations(t, gs, size)
				}
				// The conns are on the path asked for (shared memory once
				// they have carried enough to switch).
				if engine == "stream" {
					for _, g := range gs {
						for _, l := range g.links {
							if l != nil {
								require.Equal(t, path, l.conn.(*rdma.Conn).Stats().Path, "rank %d", g.Rank())
							}
						}
					}
				}
			})
		}
	}
}
