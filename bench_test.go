package rdma

import (
	"io"
	"net"
	"testing"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Each benchmark runs over rdma (the soft provider) and over TCP loopback in
// the same run, so that the two compare as a ratio on the same machine.

// benchPairs runs f over rdma on soft with its default same-host path
// (shared memory), over rdma with soft carrying frames on TCP, and over TCP
// loopback.
func benchPairs(b *testing.B, f func(b *testing.B, c, s net.Conn)) {
	b.Run("rdma", func(b *testing.B) {
		c, s := pair(b, nil)
		f(b, c, s)
	})
	b.Run("rdma-softtcp", func(b *testing.B) {
		prev := soft.SetSharedMemory(false)
		c, s := pair(b, softConfig())
		soft.SetSharedMemory(prev)
		f(b, c, s)
	})
	b.Run("tcp", func(b *testing.B) {
		c, s := testsupport.TCP(b, "")
		f(b, c, s)
	})
}

// BenchmarkStream: one-way throughput with 64 KiB writes.
func BenchmarkStream(b *testing.B) {
	benchPairs(b, func(b *testing.B, c, s net.Conn) {
		const size = 64 << 10
		buf := make([]byte, size)
		done := make(chan error, 1)
		total := int64(b.N) * size
		go func() {
			rbuf := make([]byte, size)
			var got int64
			for got < total {
				n, err := s.Read(rbuf)
				if err != nil {
					done <- err
					return
				}
				got += int64(n)
			}
			done <- nil
		}()
		b.SetBytes(size)
		b.ReportAllocs()
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

// BenchmarkRoundTrip64: 64-byte request, 64-byte echo.
func BenchmarkRoundTrip64(b *testing.B) {
	benchPairs(b, func(b *testing.B, c, s net.Conn) {
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := io.ReadFull(s, buf); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 64)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
