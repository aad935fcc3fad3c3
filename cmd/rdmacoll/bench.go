package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rdmanet/rdma/collectives"
)

// header names the columns of a result line; collmpi.c prints the same.
const header = "# op              size     time(us)  algbw(GB/s)  busbw(GB/s)  check"

// result is one operation at one size: the median over the timed runs of
// the slowest rank's time.
type result struct {
	op      string
	size    int
	ranks   int
	median  time.Duration
	checked bool
}

func (r result) algbw() float64 { return float64(r.size) / r.median.Seconds() / 1e9 }

// busFactor is nccl-tests' factor from algorithm to bus bandwidth.
func busFactor(op string, n int) float64 {
	switch op {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "broadcast":
		return 1
	default:
		return float64(n-1) / float64(n)
	}
}

func (r result) line() string {
	chk := "-"
	if r.checked {
		chk = "ok"
	}
	us := float64(r.median.Nanoseconds()) / 1e3
	return fmt.Sprintf("%-12s %10d %12.2f %12.3f %12.3f  %s", r.op, r.size, us, r.algbw(), r.algbw()*busFactor(r.op, r.ranks), chk)
}

// bench holds the buffers of the largest size run so far, reused.
type bench struct {
	g     *collectives.Group
	o     *options
	send  []byte
	recv  []byte
	f32s  []float32
	f32r  []float32
	times []float64
}

func newBench(g *collectives.Group, o *options) *bench {
	return &bench{g: g, o: o, times: make([]float64, o.iters)}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// effectiveSize rounds size down to what op can move: whole float32s for
// allreduce, n equal blocks of whole words for allgather and alltoall.
func effectiveSize(op string, size, n int) int {
	switch op {
	case "allreduce":
		return max(4, size/4*4)
	case "allgather", "alltoall":
		return max(4*n, size/(4*n)*4*n)
	}
	return size
}

func (b *bench) measure(ctx context.Context, op string, size int) (result, error) {
	g := b.g
	n := g.Size()
	size = effectiveSize(op, size, n)
	res := result{op: op, size: size, ranks: n, checked: b.o.check}
	runOp, prepare, verify := b.operation(ctx, op, size)
	for it := 0; it < b.o.warmup+b.o.iters; it++ {
		if b.o.check {
			prepare(it)
		}
		if err := g.Barrier(ctx); err != nil {
			return res, err
		}
		t0 := time.Now()
		if err := runOp(); err != nil {
			return res, err
		}
		el := time.Since(t0)
		if it >= b.o.warmup {
			b.times[it-b.o.warmup] = el.Seconds()
		}
		if b.o.check {
			if err := verify(it); err != nil {
				return res, fmt.Errorf("rank %d, run %d: %w", g.Rank(), it, err)
			}
		}
	}
	// The slowest rank's time of each run.
	if err := collectives.AllReduce(ctx, g, b.times, b.times, collectives.Max); err != nil {
		return res, err
	}
	if b.o.runs != nil && g.Rank() == 0 {
		fmt.Fprintf(b.o.runs, "# %s %d: every run's time (us):", op, size)
		for _, t := range b.times {
			fmt.Fprintf(b.o.runs, " %.1f", t*1e6)
		}
		fmt.Fprintln(b.o.runs)
	}
	sorted := slices.Clone(b.times)
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		med = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	res.median = time.Duration(med * 1e9)
	return res, nil
}

// operation returns the timed call, the filling of its inputs before run
// it, and the check of its results after it.
func (b *bench) operation(ctx context.Context, op string, size int) (run func() error, prepare func(it int), verify func(it int) error) {
	g := b.g
	n, rank := g.Size(), g.Rank()
	switch op {
	case "allreduce":
		count := size / 4
		b.f32s, b.f32r = grow(b.f32s, count), grow(b.f32r, count)
		send, recv := b.f32s, b.f32r
		run = func() error { return collectives.AllReduce(ctx, g, send, recv, collectives.Sum) }
		// rank r contributes (r+1)*k, k in 1..13: the sum n(n+1)/2*k is exact.
		prepare = func(it int) {
			for i := range send {
				send[i] = float32((rank + 1) * ((i+it)%13 + 1))
			}
			clear(recv)
		}
		verify = func(it int) error {
			tri := n * (n + 1) / 2
			for i, v := range recv {
				if want := float32(tri * ((i+it)%13 + 1)); v != want {
					return fmt.Errorf("allreduce: element %d is %v, want %v", i, v, want)
				}
			}
			return nil
		}
	case "broadcast":
		b.recv = grow(b.recv, size)
		buf := b.recv
		run = func() error { return g.Broadcast(ctx, 0, buf) }
		prepare = func(it int) {
			if rank == 0 {
				for i := range buf {
					buf[i] = byte(i*7 + it)
				}
			} else {
				clear(buf)
			}
		}
		verify = func(it int) error {
			for i, v := range buf {
				if want := byte(i*7 + it); v != want {
					return fmt.Errorf("broadcast: byte %d is %d, want %d", i, v, want)
				}
			}
			return nil
		}
	case "allgather":
		blk := size / n
		b.send, b.recv = grow(b.send, blk), grow(b.recv, size)
		send, recv := b.send, b.recv
		run = func() error { return g.AllGather(ctx, send, recv) }
		prepare = func(it int) {
			for i := range send {
				send[i] = byte(i + 31*rank + it)
			}
			clear(recv)
		}
		verify = func(it int) error {
			for i, v := range recv {
				from, k := i/blk, i%blk
				if want := byte(k + 31*from + it); v != want {
					return fmt.Errorf("allgather: byte %d of rank %d's block is %d, want %d", k, from, v, want)
				}
			}
			return nil
		}
	case "alltoall":
		blk := size / n
		b.send, b.recv = grow(b.send, size), grow(b.recv, size)
		send, recv := b.send, b.recv
		run = func() error { return g.AllToAll(ctx, send, recv) }
		prepare = func(it int) {
			for i := range send {
				to, k := i/blk, i%blk
				send[i] = byte(k + 31*rank + 7*to + it)
			}
			clear(recv)
		}
		verify = func(it int) error {
			for i, v := range recv {
				from, k := i/blk, i%blk
				if want := byte(k + 31*from + 7*rank + it); v != want {
					return fmt.Errorf("alltoall: byte %d of rank %d's block is %d, want %d", k, from, v, want)
				}
			}
			return nil
		}
	}
	return run, prepare, verify
}
