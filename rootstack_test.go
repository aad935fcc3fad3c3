package rdma

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/rootstack"
)

// The suite's stack tunes the fields it names and keeps the rest of the
// caller's Config (rdmacore's suite runs with BusyPoll set).
func TestSuiteStackTunesAConfig(t *testing.T) {
	s := rootstack.Root()
	require.NotNil(t, s, "the package sets the suite's stack at init")
	base := Config{Provider: ProviderSoft, BusyPoll: true, RingSize: 1 << 20, HandshakeTimeout: 3 * time.Second}
	tn := s.Tuning(base)
	assert.Equal(t, rootstack.Tuning{Provider: ProviderSoft, RingSize: 1 << 20}, tn)
	tn.Wire, tn.RingSize, tn.SendBufferSize, tn.RecvDepth, tn.SendDepth = WireRsocket, 8<<10, 4<<10, 8, 16
	tn.RendezvousThreshold, tn.KeepAlive, tn.PeerTimeout = 4<<10, -1, time.Second
	got, ok := s.Tune(base, tn).(Config)
	require.True(t, ok, "Tune returns a Config")
	assert.Equal(t, Config{Provider: ProviderSoft, Wire: WireRsocket, BusyPoll: true, HandshakeTimeout: 3 * time.Second,
		RingSize: 8 << 10, SendBufferSize: 4 << 10, RecvDepth: 8, SendDepth: 16,
		RendezvousThreshold: 4 << 10, KeepAlive: -1, PeerTimeout: time.Second}, got)
	assert.Equal(t, tn, s.Tuning(got))
	assert.Equal(t, Config{Provider: ProviderSoft}, s.Tune(nil, rootstack.Tuning{Provider: ProviderSoft}), "nil is the zero Config")
	assert.True(t, base.BusyPoll && base.RingSize == 1<<20, "the caller's Config is not changed")
}
