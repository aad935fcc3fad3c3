package capi

import (
	"sync"
	"testing"

	"github.com/rdmanet/rdma/collectives"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onAll runs f on the server (rank 0) and every client at once.
func onAll(t *testing.T, s *star, f func(c *Context) error) {
	t.Helper()
	all := append([]*Context{s.server}, s.clients...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "participant %d", i)
	}
}

func TestGroupCollectives(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		const n = 4
		s := newStar(t, tr, n-1, 64)
		ranks := make([]int, n)
		all := append([]*Context{s.server}, s.clients...)
		onAll(t, s, func(c *Context) error {
			r, err := c.GroupInit()
			for i := range all {
				if all[i] == c {
					ranks[i] = r
				}
			}
			return err
		})
		assert.Equal(t, []int{0, 1, 2, 3}, ranks)
		assert.Equal(t, n, s.server.GroupSize())
		onAll(t, s, func(c *Context) error { return c.Barrier() })

		bufs := make([][]byte, n)
		onAll(t, s, func(c *Context) error {
			r := ranks[indexOf(all, c)]
			buf := []byte{byte(r), 0, 0}
			if r == 2 {
				buf = []byte("two")
			}
			bufs[r] = buf
			return c.Bcast(buf, 2)
		})
		for r := range bufs {
			assert.Equal(t, "two", string(bufs[r]), "rank %d", r)
		}

		gathered := make([][]byte, n)
		onAll(t, s, func(c *Context) error {
			r := ranks[indexOf(all, c)]
			gathered[r] = make([]byte, 2*n)
			return c.AllGather([]byte{byte(r), byte(10 + r)}, gathered[r])
		})
		for r := range gathered {
			assert.Equal(t, []byte{0, 10, 1, 11, 2, 12, 3, 13}, gathered[r])
		}

		sums := make([][]int64, n)
		maxes := make([][]float64, n)
		onAll(t, s, func(c *Context) error {
			r := ranks[indexOf(all, c)]
			sums[r] = []int64{int64(r), 1}
			if err := AllReduce(c, sums[r], sums[r], collectives.Sum); err != nil {
				return err
			}
			maxes[r] = []float64{float64(-r)}
			return Reduce(c, 1, maxes[r], maxes[r], collectives.Min)
		})
		for r := range sums {
			assert.Equal(t, []int64{6, 4}, sums[r])
		}
		assert.Equal(t, []float64{-3}, maxes[1])

		lone, err := initWith(tr, "127.0.0.2", 0, 64, false)
		require.NoError(t, err)
		defer lone.Close()
		require.ErrorIs(t, lone.Barrier(), ErrNoGroup)
	})
}

func indexOf(all []*Context, c *Context) int {
	for i := range all {
		if all[i] == c {
			return i
		}
	}
	return -1
}

func FuzzParseInvite(f *testing.F) {
	f.Add(appendInvite(nil, invite{rank: 1, size: 3, secret: make([]byte, 32), root: "127.0.0.1:1"}))
	f.Add([]byte("RDCG\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		inv, err := parseInvite(b)
		if err == nil && (inv.rank < 1 || inv.rank >= inv.size || len(inv.root) > 255) {
			t.Fatalf("accepted %+v", inv)
		}
	})
}
