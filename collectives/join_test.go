package collectives

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB, ip string) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// joinAll runs Join for every rank at once.
func joinAll(t testing.TB, n int, f func(ctx context.Context, rank int, root string) (*Group, error)) []*Group {
	return joinAllAt(t, n, freeAddr(t, "127.0.0.1"), f)
}

func joinAllAt(t testing.TB, n int, root string, f func(ctx context.Context, rank int, root string) (*Group, error)) []*Group {
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[r], errs[r] = f(ctx, r, root)
		}()
	}
	wg.Wait()
	t.Cleanup(func() { closeAll(gs) })
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r) // every rank's error, to find the first cause
	}
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, r, gs[r].Rank())
		require.Equal(t, n, gs[r].Size())
	}
	return gs
}

// checkGroup runs a few operations that use every link.
func checkGroup(t *testing.T, gs []*Group) {
	n := len(gs)
	mustAll(t, gs, func(g *Group) error {
		ctx := testCtx(t)
		v := []int64{int64(g.Rank() + 1)}
		if err := AllReduce(ctx, g, v, v, Sum); err != nil {
			return err
		}
		if v[0] != int64(n*(n+1)/2) {
			t.Errorf("rank %d: sum %d", g.Rank(), v[0])
		}
		send := make([]byte, n*3)
		for i := range send {
			send[i] = byte(g.Rank()*16 + i/3)
		}
		recv := make([]byte, n*3)
		if err := g.AllToAll(ctx, send, recv); err != nil {
			return err
		}
		for j := 0; j < n; j++ {
			if recv[j*3] != byte(j*16+g.Rank()) {
				t.Errorf("rank %d: block from %d is %d", g.Rank(), j, recv[j*3])
			}
		}
		return nil
	})
}

func TestJoinTCP(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		t.Run(name("n=", n), func(t *testing.T) {
			gs := joinAll(t, n, func(ctx context.Context, rank int, root string) (*Group, error) {
				b := Bootstrap{TCP: true}
				return b.Join(ctx, rank, n, root)
			})
			checkGroup(t, gs)
		})
	}
}

// Ranks may start before the root listens: they keep dialing.
func TestJoinRootStartsLast(t *testing.T) {
	const n = 3
	gs := joinAll(t, n, func(ctx context.Context, rank int, root string) (*Group, error) {
		if rank == 0 {
			time.Sleep(300 * time.Millisecond)
		}
		b := Bootstrap{TCP: true}
		return b.Join(ctx, rank, n, root)
	})
	checkGroup(t, gs)
}

// Ranks on different loopback addresses stand in for different hosts.
func TestJoinTCPSeveralHosts(t *testing.T) {
	const n = 4
	gs := joinAll(t, n, func(ctx context.Context, rank int, root string) (*Group, error) {
		b := Bootstrap{TCP: true, LocalAddr: "127.0.0." + name(rank+1)}
		return b.Join(ctx, rank, n, root)
	})
	for r, g := range gs {
		for p, l := range g.links {
			if l != nil && p > 0 && r > 0 {
				require.True(t, strings.HasPrefix(l.conn.LocalAddr().String(), "127.0.0."+name(r+1)+":"), "rank %d to %d: %v", r, p, l.conn.LocalAddr())
			}
		}
	}
	checkGroup(t, gs)
}

func TestJoinRDMA(t *testing.T) {
	cfg := &rdma.Config{Provider: "soft"}
	for _, n := range []int{2, 4} {
		t.Run(name("n=", n), func(t *testing.T) {
			gs := joinAll(t, n, func(ctx context.Context, rank int, root string) (*Group, error) {
				return Join(ctx, rank, n, root, cfg)
			})
			for _, g := range gs {
				for _, l := range g.links {
					if l != nil {
						rc, ok := l.conn.(*rdma.Conn)
						require.True(t, ok, "%T", l.conn)
						require.Equal(t, "soft", rc.Provider())
					}
				}
			}
			checkGroup(t, gs)
		})
	}
}

// Over real verbs: runs in the Soft-RoCE VM of scripts/softroce (the
// kernel's rdma_rxe driver under rdma-core), where SOFTROCE_IP is the address
// of the emulated RDMA device; elsewhere there is no device to test.
//
//	go test -c -o DIR/c.test ./collectives && scripts/softroce/run-in-vm.sh DIR ./c.test -test.run RDMACore -test.v
func TestJoinRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	cfg := &rdma.Config{Provider: "rdmacore"}
	const n = 4
	gs := joinAllAt(t, n, freeAddr(t, ip), func(ctx context.Context, rank int, root string) (*Group, error) {
		b := Bootstrap{Config: cfg, LocalAddr: ip}
		return b.Join(ctx, rank, n, root)
	})
	for _, g := range gs {
		for _, l := range g.links {
			if l != nil {
				require.Equal(t, "rdmacore", l.conn.(*rdma.Conn).Provider())
			}
		}
	}
	checkGroup(t, gs)
	in := make([][]float32, n)
	for r := range in {
		in[r] = inputs[float32](mib/4+3, keyOf(13, r))
	}
	want := serialReduce(in, Sum)
	out := make([][]float32, n)
	mustAll(t, gs, func(g *Group) error {
		out[g.Rank()] = make([]float32, len(want))
		return AllReduce(testCtx(t), g, in[g.Rank()], out[g.Rank()], Sum)
	})
	for r := range out {
		require.Equal(t, want, out[r], "rank %d", r)
	}
}

func TestJoinErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Join(ctx, 3, 3, "127.0.0.1:1", nil)
	require.ErrorContains(t, err, "out of range")
	_, err = Join(ctx, 0, 0, "127.0.0.1:1", nil)
	require.ErrorContains(t, err, "size")
	_, err = Join(ctx, 1, 2, "", nil)
	require.ErrorContains(t, err, "root address")

	// A rank whose root never comes fails when ctx ends.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	b := Bootstrap{TCP: true}
	_, err = b.Join(cctx, 0, 2, freeAddr(t, "127.0.0.1"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// Junk on the root's port does not disturb a Join.
func TestJoinIgnoresStrays(t *testing.T) {
	const n = 3
	root := freeAddr(t, "127.0.0.1")
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := Bootstrap{TCP: true}
		gs[0], errs[0] = b.Join(ctx, 0, n, root)
	}()
	// Strays: garbage, and a silent conn.
	var c1, c2 net.Conn
	require.Eventually(t, func() bool {
		var err error
		c1, err = net.Dial("tcp", root)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	defer c1.Close()
	_, _ = c1.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c2, err := net.Dial("tcp", root)
	require.NoError(t, err)
	defer c2.Close()
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := Bootstrap{TCP: true}
			gs[r], errs[r] = b.Join(ctx, r, n, root)
		}()
	}
	wg.Wait()
	defer closeAll(gs)
	for r := range gs {
		require.NoError(t, errs[r])
	}
	checkGroup(t, gs)
}

func TestParamsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	p, err := paramsFromEnv(env("RDMA_RANK", "2", "RDMA_WORLD_SIZE", "4", "RDMA_ROOT_ADDR", "127.0.0.1:9000"))
	require.NoError(t, err)
	require.Equal(t, envParams{rank: 2, size: 4, root: "127.0.0.1:9000"}, p)

	p, err = paramsFromEnv(env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "3", "RDMA_ROOT_ADDR", "h:1", "RDMA_LOCAL_ADDR", "127.0.0.2"))
	require.NoError(t, err)
	require.Equal(t, envParams{rank: 1, size: 3, root: "h:1", local: "127.0.0.2"}, p)

	p, err = paramsFromEnv(env("SLURM_PROCID", "0", "SLURM_NTASKS", "8", "RDMA_ROOT_ADDR", "h:1"))
	require.NoError(t, err)
	require.Equal(t, 8, p.size)

	p, err = paramsFromEnv(env("RANK", "3", "WORLD_SIZE", "4", "MASTER_ADDR", "::1", "MASTER_PORT", "29500"))
	require.NoError(t, err)
	require.Equal(t, envParams{rank: 3, size: 4, root: "[::1]:29500"}, p)

	// RDMA_* wins over a launcher's variables.
	p, err = paramsFromEnv(env("RDMA_RANK", "1", "RDMA_WORLD_SIZE", "2", "RANK", "5", "WORLD_SIZE", "9", "RDMA_ROOT_ADDR", "h:1"))
	require.NoError(t, err)
	require.Equal(t, 1, p.rank)

	_, err = paramsFromEnv(env())
	require.ErrorContains(t, err, "RDMA_RANK")
	_, err = paramsFromEnv(env("RANK", "1", "WORLD_SIZE", "2"))
	require.ErrorContains(t, err, "RDMA_ROOT_ADDR")
	_, err = paramsFromEnv(env("RANK", "1"))
	require.ErrorContains(t, err, "WORLD_SIZE")
	_, err = paramsFromEnv(env("RANK", "x", "WORLD_SIZE", "2", "RDMA_ROOT_ADDR", "h:1"))
	require.ErrorContains(t, err, "RANK")
	_, err = paramsFromEnv(env("RANK", "2", "WORLD_SIZE", "2", "RDMA_ROOT_ADDR", "h:1"))
	require.ErrorContains(t, err, "rank < size")
}

// A group's conns get 2 MiB rings and send buffers unless the caller's
// Config sets them; the caller's Config is left as it was.
func TestLinkConfig(t *testing.T) {
	c := linkConfig(nil)
	assert.Equal(t, linkRing, c.RingSize)
	assert.Equal(t, linkRing, c.SendBufferSize)
	mine := &rdma.Config{RingSize: 256 << 10, Provider: rdma.ProviderSoft}
	c = linkConfig(mine)
	assert.Equal(t, 256<<10, c.RingSize)
	assert.Equal(t, linkRing, c.SendBufferSize)
	assert.Equal(t, rdma.ProviderSoft, c.Provider)
	assert.Zero(t, mine.SendBufferSize, "the caller's Config changed")
}
