package rdma

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCopyFile: io.Copy from a 16 MiB file to a conn (the file
// serving of net/http), the reader draining with 1 MiB Reads; one op is
// the whole file. Over rdma (shared memory and soft's TCP path) and TCP;
// each also with the conn's ReadFrom hidden ("writes": io.Copy's own
// 32 KiB buffer and a Write per piece), the comparison ReadFrom is for.
func BenchmarkCopyFile(b *testing.B) {
	for _, mode := range []string{"readfrom", "writes"} {
		b.Run(mode, func(b *testing.B) { benchCopyFile(b, mode == "writes") })
	}
}

func benchCopyFile(b *testing.B, writes bool) {
	const size = 16 << 20
	name := filepath.Join(b.TempDir(), "f")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(name, data, 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	benchPairs(b, func(b *testing.B, c, s net.Conn) {
		done := make(chan error, 1)
		total := int64(b.N) * size
		go func() {
			rbuf := make([]byte, 1<<20)
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
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				b.Fatal(err)
			}
			var dst io.Writer = c
			if writes {
				dst = struct{ io.Writer }{c}
			}
			if n, err := io.Copy(dst, f); err != nil || n != size {
				b.Fatal(n, err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}
