package collectives

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// driver keeps one goroutine per rank, so that an operation can be run on
// every rank without creating goroutines or closures each time.
type driver struct {
	gs    []*Group
	start []chan func(*Group) error
	done  chan error
}

func newDriver(gs []*Group) *driver {
	d := &driver{gs: gs, done: make(chan error, len(gs))}
	for _, g := range gs {
		c := make(chan func(*Group) error)
		d.start = append(d.start, c)
		go func() {
			for f := range c {
				d.done <- f(g)
			}
		}()
	}
	return d
}

// run runs f on every rank and returns the first error.
func (d *driver) run(f func(*Group) error) error {
	for _, c := range d.start {
		c <- f
	}
	var first error
	for range d.start {
		if err := <-d.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *driver) stop() {
	for _, c := range d.start {
		close(c)
	}
}

// The data path allocates nothing in steady state: operations reuse their
// scratch buffers, frames are posted to the link goroutines by value, and
// reductions work on views of the caller's slices.
func TestOperationsDoNotAllocate(t *testing.T) {
	const n = 5
	gs := newGroups(t, n, tcpMesh)
	d := newDriver(gs)
	defer d.stop()
	ctx := context.Background()
	small, big := 100, 300_000
	f64 := make([][]float64, n)
	i32 := make([][]int32, n)
	bytesIn := make([][]byte, n)
	bytesOut := make([][]byte, n)
	for r := 0; r < n; r++ {
		f64[r] = make([]float64, big)
		i32[r] = make([]int32, big)
		bytesIn[r] = make([]byte, n*big)
		bytesOut[r] = make([]byte, n*big)
	}
	ops := map[string]func(g *Group) error{
		"Barrier":         func(g *Group) error { return g.Barrier(ctx) },
		"AllReduce small": func(g *Group) error { b := f64[g.Rank()][:small]; return AllReduce(ctx, g, b, b, Sum) },
		"AllReduce large": func(g *Group) error { b := f64[g.Rank()]; return AllReduce(ctx, g, b, b, Sum) },
		"Reduce small":    func(g *Group) error { b := i32[g.Rank()][:small]; return Reduce(ctx, g, 1, b, b, Max) },
		"Reduce large":    func(g *Group) error { b := i32[g.Rank()]; return Reduce(ctx, g, 2, b, b, Min) },
		"Broadcast small": func(g *Group) error { return g.Broadcast(ctx, 3, bytesIn[g.Rank()][:small]) },
		"Broadcast large": func(g *Group) error { return g.Broadcast(ctx, 3, bytesIn[g.Rank()]) },
		"AllToAll small":  func(g *Group) error { return g.AllToAll(ctx, bytesIn[g.Rank()][:n*8], bytesOut[g.Rank()][:n*8]) },
		"AllToAll large":  func(g *Group) error { return g.AllToAll(ctx, bytesIn[g.Rank()], bytesOut[g.Rank()]) },
		"AllGather small": func(g *Group) error { return g.AllGather(ctx, bytesIn[g.Rank()][:8], bytesOut[g.Rank()][:n*8]) },
		"AllGather large": func(g *Group) error { return g.AllGather(ctx, bytesIn[g.Rank()][:big], bytesOut[g.Rank()]) },
		"Scatter":         func(g *Group) error { return g.Scatter(ctx, 0, bytesIn[g.Rank()], bytesOut[g.Rank()][:big]) },
		"Gather":          func(g *Group) error { return g.Gather(ctx, 4, bytesIn[g.Rank()][:big], bytesOut[g.Rank()]) },
	}
	for name, op := range ops {
		require.NoError(t, d.run(op), name) // warm up: scratch buffers grow
		allocs := testing.AllocsPerRun(5, func() {
			if err := d.run(op); err != nil {
				t.Error(err)
			}
		})
		require.Zero(t, allocs, "%s allocates %v times per run (all %d ranks)", name, allocs, n)
	}
}
