package rdma

import (
	"bytes"
	crand "crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onlyReader hides a reader's other methods (io.WriterTo), so that
// io.Copy takes the destination's ReadFrom.
type onlyReader struct{ io.Reader }

// onlyWriter hides a writer's io.ReaderFrom, so that io.Copy takes the
// source's WriteTo.
type onlyWriter struct{ io.Writer }

// io.Copy from a file to a Conn and from a Conn to a file goes through
// ReadFrom and WriteTo and carries every byte, in order, with Writes
// before and after; a rendezvous from a Buffer in the middle of the
// stream comes out of WriteTo in its place.
func TestCopyFileToConn(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		c, s := pair(t, lowRndv(t))
		want := make([]byte, 5<<20+77)
		crand.Read(want)
		name := filepath.Join(t.TempDir(), "src")
		require.NoError(t, os.WriteFile(name, want, 0o600))
		f, err := os.Open(name)
		require.NoError(t, err)
		defer f.Close()

		mid := allocBuffer(t, 300<<10)
		crand.Read(mid.Bytes())
		errc := make(chan error, 1)
		go func() {
			errc <- func() error {
				if _, err := c.Write([]byte("head")); err != nil {
					return err
				}
				n, err := io.Copy(c, f) // *os.File's WriteTo falls back to c.ReadFrom
				if err != nil {
					return err
				}
				if n != int64(len(want)) {
					return io.ErrShortWrite
				}
				if _, err := c.Write(mid.Bytes()); err != nil { // a rendezvous
					return err
				}
				if _, err := c.ReadFrom(onlyReader{bytes.NewReader([]byte("tail"))}); err != nil {
					return err
				}
				return c.CloseWrite()
			}()
		}()
		var got bytes.Buffer
		n, err := io.Copy(onlyWriter{&got}, s) // s.WriteTo
		require.NoError(t, err)
		require.NoError(t, <-errc)
		all := append(append(append([]byte("head"), want...), mid.Bytes()...), "tail"...)
		assert.Equal(t, int64(len(all)), n)
		require.True(t, bytes.Equal(all, got.Bytes()), "%d bytes, want %d", got.Len(), len(all))
	})
}

// ReadFrom from a reader that hands out slivers: every byte arrives, in
// order (tiny reads, reads across the send buffer's end).
func TestReadFromSlivers(t *testing.T) {
	cfg := softConfig()
	cfg.RingSize = 16 << 10
	cfg.SendBufferSize = 8 << 10
	c, s := pair(t, cfg)
	want := make([]byte, 1<<20)
	crand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadFrom(&sliverReader{b: want})
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(want, got))
}

// sliverReader returns 1..1000 bytes per Read.
type sliverReader struct {
	b []byte
	i uint
}

func (r *sliverReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	r.i = r.i*7 + 13
	n := copy(p[:min(len(p), 1+int(r.i%1000))], r.b)
	r.b = r.b[n:]
	return n, nil
}
