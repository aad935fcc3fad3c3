package rdma

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The process's memory of soft-only peers is bounded whatever is dialed
// (internal/ttlset's tests cover its rules).
func TestPeerMemory(t *testing.T) {
	useMemory(t)
	t0 := time.Now()
	for i := 0; i < 3*softOnlyMax; i++ {
		softOnlyPeers.Remember("10.0.0.1:"+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	assert.Equal(t, softOnlyMax, softOnlyPeers.Len())
	_, ok := softOnlyPeers.Recall("10.0.0.1:"+strconv.Itoa(3*softOnlyMax-1), t0.Add(time.Second))
	assert.True(t, ok, "the newest is remembered")
	_, ok = softOnlyPeers.Recall("10.0.0.1:0", t0.Add(time.Second))
	assert.False(t, ok, "the oldest went")
	_, ok = softOnlyPeers.Recall("10.0.0.1:"+strconv.Itoa(3*softOnlyMax-1), t0.Add(softOnlyTTL+4*time.Second))
	assert.False(t, ok, "expired after softOnlyTTL")
}

// useMemory empties the process's memory of soft-only peers for a test.
func useMemory(t *testing.T) {
	softOnlyPeers.Clear()
	t.Cleanup(softOnlyPeers.Clear)
}

// A peer without a device (its RDMA side swallows the connect) costs the
// first auto dial RDMAConnectTimeout; the next dials go to soft at once,
// until the memory expires.
func TestAutoDialRemembersSoftOnlyPeer(t *testing.T) {
	sp := useSpaceProvider(t)
	useMemory(t)
	ln := listen(t, softConfig())
	sp.setSilent(ln.Addr().(*Addr).Port, true)
	provs := echoServer(t, ln, 3)
	addr := ln.Addr().String()
	cfg := &Config{RDMAConnectTimeout: 500 * time.Millisecond}

	dialFallback := func() *FallbackError {
		t.Helper()
		c, err := dialCfg(t, cfg, addr, 30*time.Second)
		require.NoError(t, err)
		assert.Equal(t, ProviderSoft, c.Provider())
		assert.Equal(t, ProviderSoft, <-provs)
		roundTrip(t, c, 1000)
		var fb *FallbackError
		require.True(t, errors.As(c.Fallback(), &fb), "Fallback() = %v", c.Fallback())
		return fb
	}
	fb := dialFallback()
	assert.GreaterOrEqual(t, fb.Elapsed, cfg.RDMAConnectTimeout)
	_, ok := softOnlyPeers.Recall(addr, time.Now())
	require.True(t, ok, "the soft-only peer is remembered")

	fb = dialFallback()
	var re *rememberedError
	assert.True(t, errors.As(fb, &re), "%v", fb)
	assert.Zero(t, fb.Elapsed, "no RDMA attempt")
	t.Logf("second dial: %v", fb)

	// Once the memory expired, the RDMA side is tried again.
	softOnlyPeers.Remember(addr, time.Now().Add(-softOnlyTTL))
	fb = dialFallback()
	assert.GreaterOrEqual(t, fb.Elapsed, cfg.RDMAConnectTimeout)
}

// A mixed listener's soft side says it has an RDMA side too: a dial that
// reached it on soft (its RDMA side did not answer in time) leaves nothing
// in the memory, and a remembered peer that turns out to be such a
// listener is forgotten, so that the next dial uses the RDMA side.
func TestAutoDialForgetsPeerWithRDMASide(t *testing.T) {
	sp := useSpaceProvider(t)
	useMemory(t)
	ln := listenAuto(t, nil, 0)
	port := ln.Addr().(*Addr).Port
	addr := ln.Addr().String()
	provs := echoServer(t, ln, 3)
	cfg := &Config{RDMAConnectTimeout: 300 * time.Millisecond}

	sp.setSilent(port, true) // its RDMA side is not answering yet
	c, err := dialCfg(t, cfg, addr, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderSoft, c.Provider())
	assert.Equal(t, ProviderSoft, <-provs)
	assert.True(t, c.c.PeerTakesRDMACM(), "the soft side of a mixed listener says so")
	_, ok := softOnlyPeers.Recall(addr, time.Now())
	assert.False(t, ok, "a mixed listener is not remembered as soft-only")

	sp.setSilent(port, false)
	softOnlyPeers.Remember(addr, time.Now()) // as if it had answered only on soft
	c, err = dialCfg(t, cfg, addr, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderSoft, c.Provider(), "a remembered peer is dialed on soft")
	assert.Equal(t, ProviderSoft, <-provs)
	_, ok = softOnlyPeers.Recall(addr, time.Now())
	assert.False(t, ok, "forgotten once its soft side said it has an RDMA side")

	c, err = dialCfg(t, cfg, addr, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, spaceName, c.Provider(), "the next dial uses the RDMA side")
	assert.NoError(t, c.Fallback())
	assert.Equal(t, spaceName, <-provs)
	roundTrip(t, c, 1000)
}
