package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistBuckets(t *testing.T) {
	// Every value falls inside its own bucket, and buckets tile the line.
	var prevHi uint64
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 1<<40 + 12345, math.MaxInt64, math.MaxUint64} {
		r, c := histIndex(v)
		require.Less(t, r, histRows)
		require.Less(t, c, histCols)
		lo, hi := histBounds(r, c)
		assert.LessOrEqual(t, lo, v)
		assert.GreaterOrEqual(t, hi, v)
		if v > 0 && v < math.MaxUint64 {
			assert.LessOrEqual(t, float64(hi-lo), float64(lo)/histCols+1, "bucket of %d is too wide", v)
		}
	}
	for v := uint64(0); v < 5000; v++ {
		r, c := histIndex(v)
		lo, hi := histBounds(r, c)
		if lo == v && v > 0 {
			assert.Equal(t, prevHi+1, lo, "gap before %d", v)
		}
		prevHi = hi
	}
}

func TestHistQuantiles(t *testing.T) {
	h := newHist()
	assert.Zero(t, h.quantile(0.5), "empty")
	rng := rand.New(rand.NewPCG(1, 2))
	var vals []int64
	for range 100000 {
		// A long-tailed latency distribution: mostly ~20us, a few ms.
		v := int64(15000 + rng.ExpFloat64()*5000)
		if rng.IntN(1000) == 0 {
			v *= 100
		}
		vals = append(vals, v)
		h.record(time.Duration(v))
	}
	slices.Sort(vals)
	exact := func(q float64) int64 { return vals[int(math.Ceil(q*float64(len(vals))))-1] }
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		got, want := h.quantile(q), exact(q)
		assert.InEpsilon(t, want, got, 0.01, "q=%v", q)
	}
	assert.Equal(t, vals[0], h.minimum())
	assert.Equal(t, vals[len(vals)-1], h.max)
	assert.Equal(t, vals[len(vals)-1], h.quantile(1))

	// Merging two halves gives the same as one histogram.
	a, b := newHist(), newHist()
	for i, v := range vals {
		if i%2 == 0 {
			a.record(time.Duration(v))
		} else {
			b.record(time.Duration(v))
		}
	}
	a.merge(b)
	assert.Equal(t, h.counts, a.counts)
	assert.Equal(t, h.quantile(0.99), a.quantile(0.99))
	assert.Equal(t, h.n, a.n)
}

func TestHistRecordAllocatesNothing(t *testing.T) {
	h := newHist()
	d := time.Duration(0)
	allocs := testing.AllocsPerRun(1000, func() {
		d += 777
		h.record(d)
	})
	assert.Zero(t, allocs)
}
