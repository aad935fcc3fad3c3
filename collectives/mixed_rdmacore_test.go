package collectives

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// A mixed group on a real kernel RDMA stack (the Soft-RoCE VM, where rxe0
// is a device): ranks 0 and 1 use provider auto (rdmacore here), ranks 2 and
// 3 soft, as hosts without a device would. Links between auto ranks are
// rdmacore; a link that involves a soft rank is soft, whichever side dials
// (the auto side falls back, the soft side reaches the mixed listener's soft
// side). AllReduce and AllToAll give the same results as anywhere.
func TestMixedGroupRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	t.Setenv(rdma.ProviderEnv, "")
	const n = 4
	// The auto ranks' bound on the rdmacore attempt is generous: it covers
	// both sides' resource setup (rings allocated and registered, receives
	// posted), which in the emulated guest under -race and a loaded host
	// has taken more than the default 1.5 s while four ranks start at once.
	// This test checks which links are rdmacore, not when a dial gives up
	// (TestMixedSilentPeerRDMACore in the root package does); a peer
	// without an RDMA listener still refuses at once, so the soft links
	// cost no more.
	auto := &rdma.Config{RDMAConnectTimeout: time.Minute}
	cfgs := []*rdma.Config{auto, auto, {Provider: rdma.ProviderSoft}, {Provider: rdma.ProviderSoft}}
	gs := joinAllAt(t, n, freeAddr(t, ip), func(ctx context.Context, rank int, root string) (*Group, error) {
		if rank > 0 {
			// An auto dial that reaches the root before it listens is
			// refused over the RDMA CM and falls back to soft at once (a
			// peer without a CM listener is a soft peer); what this test
			// checks is the links between running listeners, so wait for
			// the root's listener. Its soft side (TCP) opens after its RDMA
			// side: once TCP answers, both do. The probe is junk to the soft
			// side, which drops it.
			waitListening(t, ctx, root)
		}
		b := Bootstrap{Config: cfgs[rank], LocalAddr: ip}
		return b.Join(ctx, rank, n, root)
	})
	for r, g := range gs {
		for p, l := range g.links {
			if l == nil {
				continue
			}
			want := rdma.ProviderSoft
			if r < 2 && p < 2 {
				want = rdma.ProviderRDMACore
			}
			c, ok := l.conn.(*rdma.Conn)
			require.True(t, ok, "rank %d's link to %d is a %T", r, p, l.conn)
			assert.Equal(t, want, c.Provider(), "rank %d -> rank %d", r, p)
			if fb := c.Fallback(); fb != nil {
				t.Logf("rank %d -> rank %d fell back: %v", r, p, fb)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const m = 50_001
	errs := make(chan error, n)
	outs := make([][]int64, n)
	a2a := make([][]byte, n)
	for r, g := range gs {
		go func() {
			send := make([]int64, m)
			for i := range send {
				send[i] = int64(r*i%13 - 6)
			}
			outs[r] = make([]int64, m)
			if err := AllReduce(ctx, g, send, outs[r], Sum); err != nil {
				errs <- err
				return
			}
			s := make([]byte, n*4096)
			for i := range s {
				s[i] = byte(r*31 + i/4096)
			}
			a2a[r] = make([]byte, n*4096)
			errs <- g.AllToAll(ctx, s, a2a[r])
		}()
	}
	for range gs {
		require.NoError(t, <-errs)
	}
	for r := range gs {
		for i := 0; i < m; i++ {
			var want int64
			for q := 0; q < n; q++ {
				want += int64(q*i%13 - 6)
			}
			if outs[r][i] != want {
				t.Fatalf("rank %d: AllReduce element %d is %d, want %d", r, i, outs[r][i], want)
			}
		}
		for i, b := range a2a[r] {
			// Block q of rank r's result is what rank q sent to r.
			q := i / 4096
			if want := byte(q*31 + r); b != want {
				t.Fatalf("rank %d: AllToAll byte %d is %d, want %d", r, i, b, want)
			}
		}
	}
}

// A mixed group across a wire (make test-softroce-mixed): ranks 0 and 1 on
// this host, which has an RDMA device (provider auto: rdmacore between
// them), rank 2 a process in namespace $MIXED_NETNS at $MIXED_PEER, across
// a veth pair, with no device (soft). Rank 1's dial to rank 2 goes out over
// the RDMA CM, is never answered, and falls back to soft after
// Config.RDMAConnectTimeout; rank 2's dial to the root reaches the soft side
// of its listener. The ranks run childRun's operations (AllReduce,
// AllToAll, Barrier) and check the results. Skipped elsewhere.
func TestMixedWireRDMACore(t *testing.T) {
	ns, peer, local := testsupport.MixedWire(t)
	require.NotEmpty(t, local, "MIXED_LOCAL: this side's address on the wire")
	t.Setenv(rdma.ProviderEnv, "")
	const n = 3
	root := freeAddr(t, local)
	far := testsupport.PeerCommandVia([]string{"ip", "netns", "exec", ns}, rankPeer)
	far.Env = append(far.Env, "RDMA_RANK=2", "RDMA_WORLD_SIZE=3",
		"RDMA_ROOT_ADDR="+root, "RDMA_LOCAL_ADDR="+peer, "RDMA_PROVIDER=soft")
	farOut := make(chan string, 1)
	go func() {
		out, err := far.CombinedOutput()
		farOut <- fmt.Sprintf("%s (exit: %v)", out, err)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	gs := make([]*Group, 2)
	for r := 0; r < 2; r++ {
		go func() {
			b := Bootstrap{LocalAddr: local}
			g, err := b.Join(ctx, r, n, root)
			if err != nil {
				errs <- err
				return
			}
			gs[r] = g
			errs <- childOps(ctx, g)
		}()
	}
	for r := 0; r < 2; r++ {
		assert.NoError(t, <-errs)
	}
	out := <-farOut
	require.True(t, strings.HasPrefix(out, "OK\n"), "rank 2 (in %s): %s", ns, out)
	for r, g := range gs {
		if g == nil {
			continue
		}
		for p, l := range g.links {
			if l == nil {
				continue
			}
			c := l.conn.(*rdma.Conn)
			want := rdma.ProviderRDMACore
			if p == 2 {
				want = rdma.ProviderSoft
			}
			assert.Equal(t, want, c.Provider(), "rank %d -> rank %d", r, p)
			if fb := c.Fallback(); fb != nil {
				t.Logf("rank %d -> rank %d: %v", r, p, fb)
			}
		}
		g.Close()
	}
}

// waitListening returns once addr accepts a TCP connection, or ctx ends.
func waitListening(t testing.TB, ctx context.Context, addr string) {
	for ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s never listened: %v", addr, ctx.Err())
}
