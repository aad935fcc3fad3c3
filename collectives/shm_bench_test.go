//go:build linux

package collectives

import (
	"context"
	"testing"
)

// The same-host engine on 2 ranks in one process, per operation and size:
//
//	go test -run '^$' -bench Shm ./collectives
func BenchmarkShm(b *testing.B) {
	for _, size := range []int{4 << 10, 256 << 10, 4 << 20} {
		gs := newEngineGroups(b, 2, "shm")
		d := newDriver(gs)
		bufs := [2][]byte{make([]byte, size), make([]byte, size)}
		outs := [2][]byte{make([]byte, size), make([]byte, size)}
		f32 := [2][]float32{make([]float32, size/4), make([]float32, size/4)}
		ctx := context.Background()
		for _, op := range []struct {
			name string
			f    func(g *Group) error
		}{
			{"AllReduce", func(g *Group) error { b := f32[g.Rank()]; return AllReduce(ctx, g, b, b, Sum) }},
			{"Broadcast", func(g *Group) error { return g.Broadcast(ctx, 0, bufs[g.Rank()]) }},
			{"AllToAll", func(g *Group) error { return g.AllToAll(ctx, bufs[g.Rank()], outs[g.Rank()]) }},
		} {
			b.Run(name(op.name, "/", size), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := d.run(op.f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		d.stop()
	}
}
