package rdma

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A writer that fills a small send buffer never waits for room behind
// unsignaled WRs alone: signaling is sparse (one WR in a quarter of the
// queue, or per quarter of the send buffer), and a writer that would
// wait with none signaled outstanding posts a signaled probe. Without
// either, nothing would report the WRs before the keepalive's probe, an
// hour away here: the Write's deadline would pass first.
func TestWriterFillingSendBufferNeedsNoKeepalive(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		cfg := softConfig()
		cfg.RingSize, cfg.SendBufferSize = 8<<10, 8<<10
		cfg.KeepAlive = time.Hour
		c, s := pair(t, cfg)

		const total = 4 << 20
		want := make([]byte, total)
		for i := range want {
			want[i] = byte(i * 7)
		}
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(io.LimitReader(s, total))
			got <- b
		}()

		// Writes above the inline threshold, so that they take send
		// buffer room, of sizes that leave slivers at its end.
		require.NoError(t, c.SetWriteDeadline(time.Now().Add(10*time.Second)))
		sizes := []int{1000, 700, 1500, 333, 2048, 900}
		for off, i := 0, 0; off < total; i++ {
			n := min(sizes[i%len(sizes)], total-off)
			_, err := c.Write(want[off : off+n])
			require.NoError(t, err, "write at %d: a writer waited for room no completion came to free", off)
			off += n
		}
		select {
		case b := <-got:
			assert.True(t, bytes.Equal(want, b), "the stream arrives whole")
		case <-time.After(30 * time.Second):
			t.Fatal("the reader did not get the whole stream")
		}
		assert.Zero(t, c.Stats().KeepAlives, "no keepalive probe was needed")
	})
}
