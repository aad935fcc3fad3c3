package soft

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// copyNonTemporal copies exactly dst's length whatever the alignment of
// dst and src, and touches nothing around it.
func TestCopyNonTemporal(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	src := make([]byte, 70<<10)
	rng.Read(src)
	buf := make([]byte, 70<<10+256)
	for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 200, 4096, 16<<10 + 37, 64 << 10} {
		for dOff := 0; dOff < 72; dOff += 7 {
			for _, sOff := range []int{0, 1, 8, 33} {
				for i := range buf {
					buf[i] = 0xa5
				}
				copyNonTemporal(buf[dOff:dOff+n], src[sOff:])
				require.True(t, bytes.Equal(buf[dOff:dOff+n], src[sOff:sOff+n]), "n %d dst +%d src +%d", n, dOff, sOff)
				require.Equal(t, bytes.Repeat([]byte{0xa5}, dOff), buf[:dOff], "before dst: n %d dst +%d", n, dOff)
				require.Equal(t, bytes.Repeat([]byte{0xa5}, len(buf)-dOff-n), buf[dOff+n:], "after dst: n %d dst +%d", n, dOff)
			}
		}
	}
}

// The ring copier copies as the built-in copy does (count included), with
// either kind of store and below the size it times.
func TestRingCopierCopies(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	src := make([]byte, 201<<10)
	rng.Read(src)
	for _, costs := range [][2]int64{{0, 0}, {100, 10}, {10, 100}} {
		c := ringCopier{cost: costs}
		for _, n := range []int{0, 100, ntCopyMin - 1, ntCopyMin, 64<<10 + 3, 200 << 10} {
			dst := make([]byte, n+5)
			got := c.copy(dst[3:3+n], src[1:])
			require.Equal(t, n, got)
			require.True(t, bytes.Equal(dst[3:3+n], src[1:1+n]), "costs %v n %d", costs, n)
			assert.Equal(t, []byte{0, 0, 0}, dst[:3])
			assert.Equal(t, []byte{0, 0}, dst[3+n:])
		}
		// A shorter source bounds the copy, as with copy.
		dst := make([]byte, 100<<10)
		require.Equal(t, 50<<10, c.copy(dst, src[:50<<10]))
		require.True(t, bytes.Equal(dst[:50<<10], src[:50<<10]))
		require.Equal(t, make([]byte, 50<<10), dst[50<<10:])
	}
}

// The choice: each kind is measured first; non-temporal stores only when
// at least 30% cheaper; the other kind every ntCopyExplore copies; a sample
// moves the average by an eighth, and at most four times the average.
func TestRingCopierPicks(t *testing.T) {
	var c ringCopier
	require.Equal(t, 0, c.pick(), "ordinary first")
	c.record(0, 1000, 10000) // 100 ps/B
	require.Zero(t, c.cost[1], "not measured yet")
	require.Equal(t, 1, c.pick(), "then non-temporal")
	c.record(1, 800, 10000) // 80: not 30% cheaper
	assert.Equal(t, [2]int64{100, 80}, c.cost)

	count := func(rounds int) (nt int) {
		for range rounds {
			nt += c.pick()
		}
		return nt
	}
	// Ordinary preferred: non-temporal only on every ntCopyExplore-th.
	c.n = 0
	assert.Equal(t, 3, count(3*ntCopyExplore))
	// Non-temporal 30% cheaper or more: preferred, ordinary explored.
	c.cost = [2]int64{100, 69}
	c.n = 0
	assert.Equal(t, 3*ntCopyExplore-3, count(3*ntCopyExplore))
	c.cost = [2]int64{100, 70}
	c.n = 0
	assert.Equal(t, 3, count(3*ntCopyExplore))

	// Averages: an eighth of the way, a sample capped at 4x.
	c.cost = [2]int64{100, 100}
	c.record(0, 180, 1000) // 180 ps/B
	assert.Equal(t, int64(110), c.cost[0])
	c.record(1, 1_000_000, 1000) // capped at 400
	assert.Equal(t, int64(137), c.cost[1])
	c.record(1, 0, 1<<20) // at least 1 ps/B
	assert.Equal(t, int64(137-136/8), c.cost[1])
}

// Copying into a ring allocates nothing.
func TestRingCopierAllocs(t *testing.T) {
	src := make([]byte, 64<<10)
	dst := make([]byte, 64<<10)
	var c ringCopier
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.copy(dst, src) }))
}
