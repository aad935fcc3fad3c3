package rdma

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On soft a long Write goes out in chunks of a quarter of the peer's ring
// (256 KiB once the rings grew to the default 1 MiB), not in the 64 KiB
// chunks a NIC's reader starts on sooner: each chunk costs soft a work
// request, a frame and a completion, on both its paths.
func TestSoftWritesQuarterRingChunks(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		c, s := pair(t, nil)
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, s)
			done <- err
		}()

		// Stream until both rings grew to Config's size.
		cfg := softConfig().withDefaults()
		buf := make([]byte, 1<<20)
		for i := 0; ; i++ {
			_, err := c.Write(buf)
			require.NoError(t, err)
			ring, _, _ := ringSizes(s)
			if c.Stats().PeerRingSize == cfg.RingSize && ring == cfg.RingSize {
				break
			}
			require.Less(t, i, 64, "the rings did not grow")
		}

		before := c.Stats().MessagesSent
		const writes = 8
		for range writes {
			_, err := c.Write(buf)
			require.NoError(t, err)
		}
		sent := c.Stats().MessagesSent - before
		chunk := cfg.RingSize / 4
		assert.LessOrEqual(t, sent, uint64(writes*(len(buf)/chunk+1)),
			"data writes for %d Writes of 1 MiB (chunks of %d bytes)", writes, chunk)
		assert.GreaterOrEqual(t, sent, uint64(writes*len(buf)/chunk), "data writes")

		require.NoError(t, c.Close())
		require.NoError(t, <-done)
	})
}
