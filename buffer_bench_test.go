package rdma

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/rdmanet/rdma/verbs"
)

// BenchmarkRegistration measures what a rendezvous' registration costs
// against the copy it saves, on the provider RDMA_PROVIDER names (default
// soft; in the Soft-RoCE VM, rdmacore): registering and deregistering a
// range of AllocMemory for remote READ (what a rendezvous Write does per
// transfer), a pinned Go heap slice the same way (runtime.Pinner, the
// alternative for Writes from the Go heap; soft refuses heap memory), and
// copying the same bytes (what the copying path does instead).
func BenchmarkRegistration(b *testing.B) {
	name := os.Getenv("RDMA_PROVIDER")
	if name == "" {
		name = ProviderSoft
	}
	p, err := verbs.Lookup(name)
	if err != nil {
		b.Skip(err)
	}
	devs, err := p.Devices()
	if err != nil || len(devs) == 0 {
		b.Skipf("no %s device: %v", name, err)
	}
	ctx, err := p.Open(devs[0].Name)
	if err != nil {
		b.Skip(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		b.Skip(err)
	}
	defer pd.Dealloc()
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20, 64 << 20} {
		mem, err := verbs.AllocMemory(size)
		if err != nil {
			b.Fatal(err)
		}
		buf := mem.Bytes()[:size]
		for i := range buf {
			buf[i] = byte(i) // resident, as a Buffer being sent is
		}
		heap := make([]byte, size)
		for i := range heap {
			heap[i] = byte(i)
		}
		b.Run(fmt.Sprintf("%s/register/%dK", name, size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				mr, err := pd.RegMR(buf, verbs.AccessRemoteRead)
				if err != nil {
					b.Fatal(err)
				}
				mr.Dereg()
			}
		})
		b.Run(fmt.Sprintf("%s/pinned-heap/%dK", name, size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				var pin runtime.Pinner
				pin.Pin(&heap[0])
				mr, err := pd.RegMR(heap, verbs.AccessRemoteRead)
				if err != nil {
					pin.Unpin()
					b.Skip(err)
				}
				mr.Dereg()
				pin.Unpin()
			}
		})
		b.Run(fmt.Sprintf("copy/%dK", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				copy(heap, buf)
			}
		})
		mem.Free()
	}
}

// BenchmarkAllocBuffer: what a Buffer costs to make, fill once and free
// (the mapping, the first touch of each page, the unmapping), against
// filling one that is reused, directly or through a BufferPool: whether a
// program that sends a message a Buffer should keep a few and reuse them
// (it should: bufferpool.go).
func BenchmarkAllocBuffer(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("alloc-fill-free/%dK", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				buf, err := AllocBuffer(size)
				if err != nil {
					b.Fatal(err)
				}
				clear(buf.Bytes())
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("pool-get-fill-put/%dK", size>>10), func(b *testing.B) {
			p, err := NewBufferPool(size, 1)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			b.SetBytes(int64(size))
			for b.Loop() {
				buf, err := p.Get()
				if err != nil {
					b.Fatal(err)
				}
				clear(buf.Bytes())
				if err := p.Put(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("reuse-fill/%dK", size>>10), func(b *testing.B) {
			buf, err := AllocBuffer(size)
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Free()
			b.SetBytes(int64(size))
			for b.Loop() {
				clear(buf.Bytes())
			}
		})
	}
}
