package main

import (
	"math"
	"math/bits"
	"time"
)

// hist is a log-linear histogram of durations in nanoseconds. Recording
// is a few integer operations on a fixed array: it never allocates, so it
// can sit inside a timed loop. Values below 2^histSubBits are exact; above,
// each power-of-two range is split into 2^histSubBits buckets, so a bucket is
// narrower than 1/128 of the values in it and a quantile read as its bucket's
// midpoint is within 0.4% of the exact one.
type hist struct {
	counts [histRows][histCols]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

const (
	histSubBits = 7
	histCols    = 1 << histSubBits
	histRows    = 64 - histSubBits + 1 // rows for every uint64
)

func newHist() *hist { return &hist{min: math.MaxInt64} }

func histIndex(v uint64) (row, col int) {
	if v < histCols {
		return 0, int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	return shift + 1, int(v>>uint(shift)) - histCols
}

// histBounds is the smallest and largest value of bucket (row, col).
func histBounds(row, col int) (lo, hi uint64) {
	if row == 0 {
		return uint64(col), uint64(col)
	}
	shift := uint(row - 1)
	top := uint64(col + histCols)
	return top << shift, (top+1)<<shift - 1
}

func (h *hist) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	r, c := histIndex(uint64(v))
	h.counts[r][c]++
	h.n++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

func (h *hist) merge(o *hist) {
	for r := range o.counts {
		for c, n := range o.counts[r] {
			h.counts[r][c] += n
		}
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// quantile is the value at or below which a fraction q of the samples lie
// (0 < q <= 1), read as the midpoint of its bucket and kept within
// [min, max]. An empty histogram gives 0.
func (h *hist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(1, min(rank, h.n))
	switch rank { // the extremes are known exactly
	case 1:
		return h.min
	case h.n:
		return h.max
	}
	var seen uint64
	for r := range h.counts {
		for c, n := range h.counts[r] {
			seen += n
			if seen >= rank {
				lo, hi := histBounds(r, c)
				v := int64(lo + (hi-lo)/2)
				return max(h.min, min(v, h.max))
			}
		}
	}
	return h.max
}

func (h *hist) mean() int64 {
	if h.n == 0 {
		return 0
	}
	return int64(h.sum / float64(h.n))
}

func (h *hist) minimum() int64 {
	if h.n == 0 {
		return 0
	}
	return h.min
}
