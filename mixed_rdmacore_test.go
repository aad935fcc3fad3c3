package rdma

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/netnstest"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// The mixed fleet on a real kernel RDMA stack: in the Soft-RoCE VM
// (scripts/softroce-test.sh) this host has a device, rxe0, so a listener
// with provider auto has an rdmacore side and a soft side on one ip:port,
// and an auto dial to a soft-only listener falls back. Outside the VM there
// is no device and the test skips.
func TestMixedFleetRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	t.Setenv(ProviderEnv, "")
	lc := ListenConfig{}
	l, err := lc.Listen(t.Context(), "rdma", ip+":0")
	require.NoError(t, err)
	ln := l.(*Listener)
	t.Cleanup(func() { ln.Close() })
	require.Equal(t, ProviderRDMACore, ln.Provider())
	require.Len(t, ln.sides, 2, "a listener on a host with a device has a soft side too")
	provs := echoServer(t, ln, 2)
	addr := ln.Addr().String()

	// The rdmacore attempt's bound is generous: in the emulated guest under
	// -race and a loaded host, a first connection's setup on both sides has
	// taken more than the default 1.5 s. The bound's own behaviour is
	// TestMixedSilentPeerRDMACore's.
	auto := &Config{RDMAConnectTimeout: time.Minute}
	ac, err := dialCfg(t, auto, addr, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderRDMACore, ac.Provider())
	assert.NoError(t, ac.Fallback())
	assert.Equal(t, ProviderRDMACore, <-provs)
	roundTrip(t, ac, 200_000)

	// A peer without a device (soft) on the same ip:port.
	sc, err := dialCfg(t, &Config{Provider: ProviderSoft}, addr, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderSoft, sc.Provider())
	assert.Equal(t, ProviderSoft, <-provs)
	roundTrip(t, sc, 200_000)

	// RDMA only: the soft peer is refused, the rdmacore one served.
	l2, err := (&ListenConfig{Config: &Config{RDMAOnly: true}}).Listen(t.Context(), "rdma", ip+":0")
	require.NoError(t, err)
	ln2 := l2.(*Listener)
	require.Len(t, ln2.sides, 1)
	provs2 := echoServer(t, ln2, 1)
	_, err = dialCfg(t, &Config{Provider: ProviderSoft}, ln2.Addr().String(), 30*time.Second)
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "soft dial to an RDMA-only listener: %v", err)
	c2, err := dialCfg(t, auto, ln2.Addr().String(), 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderRDMACore, c2.Provider())
	assert.Equal(t, ProviderRDMACore, <-provs2)
	roundTrip(t, c2, 1000)

	// A host without a device listens soft only: the auto dial hears
	// REJECTED (no listener) over the RDMA CM and falls back at once (the
	// bound is an hour: only the answer can make it fall back).
	l3, err := (&ListenConfig{Config: softConfig()}).Listen(t.Context(), "rdma", ip+":0")
	require.NoError(t, err)
	ln3 := l3.(*Listener)
	provs3 := echoServer(t, ln3, 1)
	start := time.Now()
	fc, err := dialCfg(t, &Config{RDMAConnectTimeout: time.Hour}, ln3.Addr().String(), 30*time.Second)
	require.NoError(t, err)
	took := time.Since(start)
	assert.Equal(t, ProviderSoft, fc.Provider())
	assert.Equal(t, ProviderSoft, <-provs3)
	var fb *FallbackError
	require.True(t, errors.As(fc.Fallback(), &fb), "Fallback() = %v", fc.Fallback())
	assert.Equal(t, ProviderRDMACore, fb.Provider)
	t.Logf("rdmacore -> soft fallback: %v spent on the RDMA CM attempt, %v for the whole dial: %v", fb.Elapsed, took, fb)
	roundTrip(t, fc, 100_000)
}

// A peer whose host has no RDMA device, on the far side of a wire: in the
// Soft-RoCE VM, scripts/softroce-mixed.sh puts namespace $MIXED_NETNS at the
// end of a veth pair whose near end carries an rxe device; the far end has
// none, so the connect request the RDMA CM sends there is never answered (no
// REJECTED, as from a host whose NIC is not RDMA-capable), and an auto dial
// falls back to soft after Config.RDMAConnectTimeout. Skipped elsewhere.
func TestMixedSilentPeerRDMACore(t *testing.T) {
	if netnsChild(t) {
		return
	}
	ns, peer, _ := testsupport.MixedWire(t)
	t.Setenv(ProviderEnv, "")
	h := &netnstest.Host{NS: ns, IP: peer}
	addr := peer + ":7000"
	srv := startChild(t, h, "TestMixedSilentPeerRDMACore", "server "+addr)
	t.Logf("soft-only server in %s: %s", ns, srv.expect(t, "LISTENING", time.Minute))

	for _, bound := range []time.Duration{1500 * time.Millisecond, 500 * time.Millisecond} {
		softOnlyPeers.Clear()
		start := time.Now()
		c, err := dialCfg(t, &Config{RDMAConnectTimeout: bound}, addr, time.Minute)
		require.NoError(t, err)
		took := time.Since(start)
		assert.Equal(t, ProviderSoft, c.Provider())
		var fb *FallbackError
		require.True(t, errors.As(c.Fallback(), &fb), "Fallback() = %v", c.Fallback())
		assert.Equal(t, ProviderRDMACore, fb.Provider)
		assert.GreaterOrEqual(t, fb.Elapsed, bound)
		t.Logf("RDMAConnectTimeout %v: fell back after %v, dial took %v in all: %v", bound, fb.Elapsed, took, fb)
		_, err = c.Write([]byte{'e'})
		require.NoError(t, err)
		roundTrip(t, c, 100_000)
		c.Close()

		// The peer answered only on soft: the next dial goes there at once.
		start = time.Now()
		c, err = dialCfg(t, &Config{RDMAConnectTimeout: bound}, addr, time.Minute)
		require.NoError(t, err)
		took = time.Since(start)
		assert.Equal(t, ProviderSoft, c.Provider())
		require.True(t, errors.As(c.Fallback(), &fb), "Fallback() = %v", c.Fallback())
		var re *rememberedError
		assert.True(t, errors.As(fb, &re), "%v", fb)
		assert.Zero(t, fb.Elapsed)
		t.Logf("repeat dial: on soft at once, dial took %v in all: %v", took, fb)
		_, err = c.Write([]byte{'e'})
		require.NoError(t, err)
		roundTrip(t, c, 1000)
		c.Close()
	}
	softOnlyPeers.Clear()
}
