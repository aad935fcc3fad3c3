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
	assert.NotZero(t, rsPingPongSpins(t, 50*time.Millisecond), "spins with PollTime")
	assert.Zero(t, rsPingPongSpins(t, -1), "spins with PollTime -1")
}

// rsPingPongSpins runs 20 round trips of 8 bytes on an rsocket pair whose
// Config has PollTime poll, and returns the spins the dialer's poll role
// made.
func rsPingPongSpins(t *testing.T, poll time.Duration) uint64 {
	cfg := rsConfig()
	cfg.PollTime = poll
	c, s := rsPair(t, cfg)
	echoed := make(chan error, 1)
	go func() {
		_, err := io.CopyN(s, s, 20*8)
		echoed <- err
	}()
	b := make([]byte, 8)
	for range 20 {
		_, err := c.Write(b)
		require.NoError(t, err)
		_, err = io.ReadFull(c, b)
		require.NoError(t, err)
	}
	require.NoError(t, <-echoed)
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	return c.c.Core.Poll.Spins
}
