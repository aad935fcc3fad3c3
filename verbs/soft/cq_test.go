package soft

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// A CQ's ring starts small and grows, wrapped or not, to the cqe it was
// created with, keeping completions in order; one more is an overrun.
func TestCQGrowsToItsSize(t *testing.T) {
	const cqe = 100
	q := newCQ(nil, cqe, nil)
	assert.Equal(t, cqe, q.Cap())
	assert.Less(t, len(q.ring), cqe, "the ring starts small")
	next, want := uint64(0), uint64(0)
	push := func(k int) {
		for range k {
			require.True(t, q.push(&verbs.WC{WRID: next}, false))
			next++
		}
	}
	poll := func(k int) {
		wc := make([]verbs.WC, k)
		n, err := q.Poll(wc)
		require.NoError(t, err)
		require.Equal(t, k, n)
		for _, w := range wc {
			require.Equal(t, want, w.WRID, "completions in order")
			want++
		}
	}
	// Wrap the first ring, then make it grow while wrapped.
	push(cqStartSize)
	poll(cqStartSize / 2)
	push(cqStartSize/2 + 1)
	poll(cqStartSize + 1)
	// Fill to cqe: the ring is then as large, and one more overruns.
	push(cqe)
	assert.Equal(t, cqe, len(q.ring))
	assert.False(t, q.push(&verbs.WC{WRID: next}, false), "completion cqe+1 overruns")
	_, err := q.Poll(make([]verbs.WC, 1))
	assert.ErrorIs(t, err, verbs.ErrCQOverrun)
}
