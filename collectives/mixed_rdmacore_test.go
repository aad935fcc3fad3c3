package collectives

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
)

// A mixed group on a real kernel RDMA stack (the Soft-RoCE VM, where rxe0
// is a device): ranks 0 and 1 use provider auto (rdmacore here), ranks 2 and
// 3 soft, as hosts without a device would. Links between auto ranks are
// rdmacore; a link that involves a soft rank is soft, whichever side dials
// (the auto side falls back, the soft side reaches the mixed listener's soft
// side). AllReduce and AllToAll give the same results as anywhere.
func TestMixedGroupRDMACore(t *testing.T) {
	ip := os.Getenv("SOFTROCE_IP")
	if os.Getenv("SOFTROCE_DEV") == "" || ip == "" {
		t.Skip("needs an RDMA device: runs in the Soft-RoCE VM (make test-softroce)")
	}
	t.Setenv(rdma.ProviderEnv, "")
	const n = 4
	cfgs := []*rdma.Config{nil, nil, {Provider: rdma.ProviderSoft}, {Provider: rdma.ProviderSoft}}
	gs := joinAllAt(t, n, freeAddr(t, ip), func(ctx context.Context, rank int, root string) (*Group, error) {
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
