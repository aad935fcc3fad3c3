package rdma

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rsocket wire polls as rdma.Conn does: a Read that waits takes the
// poll role and spins for Config.PollTime before it sleeps, and PollTime
// -1 never spins.
func TestRsocketPollTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		poll  time.Duration
		spins bool
	}{{"PollTime", 50 * time.Millisecond, true}, {"no spin", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rsConfig()
			cfg.PollTime = tc.poll
			c, s := rsPair(t, cfg)
			done := make(chan error, 1)
			go func() {
				b := make([]byte, 8)
				for range 20 {
					if _, err := io.ReadFull(s, b); err != nil {
						done <- err
						return
					}
					if _, err := s.Write(b); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b := make([]byte, 8)
			for range 20 {
				_, err := c.Write(b)
				require.NoError(t, err)
				_, err = io.ReadFull(c, b)
				require.NoError(t, err)
			}
			require.NoError(t, <-done)
			c.mu.Lock()
			spins := c.poll.spins
			c.mu.Unlock()
			assert.Equal(t, tc.spins, spins > 0, "spins: %d", spins)
		})
	}
}
