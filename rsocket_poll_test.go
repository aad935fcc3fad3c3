package rdma

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rsocket wire polls as rdma.Conn does: a Read that waits takes the
// poll role and asks to spin for Config.PollTime before it sleeps, and
// PollTime -1 never asks. Whether the process lets an asked spin begin is
// its spin limit's (internal/spinlimit): on rdmacore it refuses while
// goroutines wait for a P, as the peer's echo often does on a crowded
// 2-vCPU guest, where all 20 waits of a run were once refused. A spinning
// channel (soft's) limits its own spins, so there the spins begin.
func TestRsocketPollTime(t *testing.T) {
	spins, refused := rsPingPongSpins(t, 50*time.Millisecond)
	assert.NotZero(t, spins+refused, "asks to spin with PollTime")
	if rsConfig().Provider == ProviderSoft {
		assert.NotZero(t, spins, "soft's channel spins")
	}
	spins, refused = rsPingPongSpins(t, -1)
	assert.Zero(t, spins+refused, "never asks to spin with PollTime -1")
}

// rsPingPongSpins runs 20 round trips of 8 bytes on an rsocket pair whose
// Config has PollTime poll, and returns the spins the dialer's poll role
// began and those the process's spin limit refused, as its Stats count
// them.
func rsPingPongSpins(t *testing.T, poll time.Duration) (spins, refused uint64) {
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
	st := c.Stats()
	return st.Spins, st.SpinsRefused
}
