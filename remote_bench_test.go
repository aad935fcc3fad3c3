package rdma

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs/soft"
)

// BenchmarkRemote: WriteRemote and ReadRemote of size bytes into memory
// the peer exposed, from g goroutines at once (each its own part of both
// Buffers), on soft's two paths (shared memory, "rdma"; TCP,
// "rdma-softtcp"); and, for a ratio on the same machine, the same bytes
// one way over TCP loopback (a Write, the peer's Reads). One goroutine
// waits for each operation's completion before the next; several keep
// several in flight, which is what an asynchronous form would buy.
func BenchmarkRemote(b *testing.B) {
	paths := []struct {
		name string
		shm  bool
	}{{"rdma", true}, {"rdma-softtcp", false}}
	for _, size := range []int{1 << 20, 4 << 10} {
		for _, op := range []string{"write", "read"} {
			for _, g := range []int{1, 4} {
				for _, p := range paths {
					b.Run(fmt.Sprintf("%s/%s/%dKiB/g%d", op, p.name, size>>10, g), func(b *testing.B) {
						// Held for the whole run: soft decides on
						// shared memory at the connection's set-up.
						prev := soft.SetSharedMemory(p.shm)
						defer soft.SetSharedMemory(prev)
						c, s := pair(b, softConfig())
						benchRemote(b, c, s, op, size, g)
					})
				}
			}
		}
		b.Run(fmt.Sprintf("tcp/%dKiB", size>>10), func(b *testing.B) {
			c, s := testsupport.TCP(b, "")
			buf := make([]byte, size)
			done := make(chan error, 1)
			total := int64(b.N+1) * int64(size)
			go func() {
				rbuf := make([]byte, 256<<10)
				for got := int64(0); got < total; {
					n, err := s.Read(rbuf)
					if err != nil {
						done <- err
						return
					}
					got += int64(n)
				}
				done <- nil
			}()
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func benchRemote(b *testing.B, c, s *Conn, op string, size, g int) {
	target := allocBuffer(b, g*size)
	d, err := s.Expose(target, 0, g*size, AccessRead|AccessWrite)
	if err != nil {
		b.Fatal(err)
	}
	local := allocBuffer(b, g*size)
	do := func(k int) error {
		p := local.Bytes()[k*size : (k+1)*size]
		if op == "write" {
			return c.WriteRemote(d, k*size, p)
		}
		return c.ReadRemote(d, k*size, p)
	}
	for i := 0; i < 8; i++ { // past soft's move to shared memory
		if err := do(0); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < g; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := do(k); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
