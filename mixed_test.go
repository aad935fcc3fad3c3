package rdma

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// These tests run the mixed-fleet code (a listener with two sides, the auto
// dialer's fallback) with spaceProvider in rdmacore's place: a provider
// with a port space of its own, as a host with a device has.

// listenAuto listens with provider auto at 127.0.0.1:port.
func listenAuto(t *testing.T, cfg *Config, port int) *Listener {
	t.Helper()
	lc := ListenConfig{Config: cfg}
	ln, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.(*Listener)
}

// echoServer accepts n conns on ln and echoes each until EOF; it returns a
// channel with the provider of every accepted conn.
func echoServer(t *testing.T, ln *Listener, n int) <-chan string {
	t.Helper()
	provs := make(chan string, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			c, err := ln.AcceptRDMA()
			if err != nil {
				return
			}
			provs <- c.Provider()
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return provs
}

// roundTrip writes a distinct message on c and checks that it comes back.
func roundTrip(t *testing.T, c net.Conn, n int) {
	t.Helper()
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte(i*7 + n)
	}
	go c.Write(msg)
	got := make([]byte, n)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
}

func dialCfg(t *testing.T, cfg *Config, addr string, timeout time.Duration) (*Conn, error) {
	t.Helper()
	d := Dialer{Config: cfg, Timeout: timeout}
	c, err := d.Dial("rdma", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c.(*Conn), nil
}

func TestMixedListenerAcceptsBothProviders(t *testing.T) {
	useSpaceProvider(t)
	ln := listenAuto(t, nil, 0)
	require.Equal(t, spaceName, ln.Provider())
	require.Len(t, ln.sides, 2)
	provs := echoServer(t, ln, 2)
	addr := ln.Addr().String()

	// A host without a device dials soft: the soft side takes it.
	sc, err := dialCfg(t, &Config{Provider: ProviderSoft}, addr, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderSoft, sc.Provider())
	assert.Equal(t, ProviderSoft, <-provs)
	roundTrip(t, sc, 100_000)

	// A host with a device dials auto: the RDMA side takes it, no fallback.
	ac, err := dialCfg(t, nil, addr, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, spaceName, ac.Provider())
	assert.NoError(t, ac.Fallback())
	assert.Equal(t, spaceName, <-provs)
	assert.Equal(t, addr, ac.RemoteAddr().String())
	roundTrip(t, ac, 100_000)
	roundTrip(t, sc, 10)
}

// A dial that reaches a mixed listener as it starts: the RDMA CM refuses
// (nothing listens yet), the soft side answers a moment later and the peer
// says it takes RDMA CM connections. The dial asks over RDMA again and
// keeps that connection, instead of staying on soft for good (seen in the
// Soft-RoCE VM as collectives' TestMixedWireRDMACore ending on soft when a
// rank dialed the root as it started listening).
func TestMixedListenerStartsDuringDial(t *testing.T) {
	useSpaceProvider(t)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := tl.Addr().(*net.TCPAddr).Port
	tl.Close()
	var provs <-chan string
	testHookAfterRDMAAttempt = func() {
		ln := listenAuto(t, nil, port)
		require.Len(t, ln.sides, 2)
		provs = echoServer(t, ln, 2)
	}
	t.Cleanup(func() { testHookAfterRDMAAttempt = nil })

	ac, err := dialCfg(t, nil, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second)
	require.NoError(t, err)
	require.NotNil(t, provs, "the RDMA attempt did not fail first")
	require.Equal(t, spaceName, ac.Provider())
	assert.NoError(t, ac.Fallback())
	// The listener accepted both: the soft connection that told us, and
	// the RDMA one, in either order: each side of the listener hands its
	// connections to Accept on its own, so the soft one, though set up
	// first, came second in 4 of 100 runs.
	assert.ElementsMatch(t, []string{ProviderSoft, spaceName}, []string{<-provs, <-provs})
	roundTrip(t, ac, 100_000)
}

func TestMixedListenerRDMAOnly(t *testing.T) {
	useSpaceProvider(t)
	ln := listenAuto(t, &Config{RDMAOnly: true}, 0)
	require.Len(t, ln.sides, 1)
	provs := echoServer(t, ln, 1)
	addr := ln.Addr().String()

	_, err := dialCfg(t, &Config{Provider: ProviderSoft}, addr, 10*time.Second)
	require.Error(t, err, "a soft dial reached an RDMA-only listener")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "%v", err)

	ac, err := dialCfg(t, nil, addr, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, spaceName, ac.Provider())
	assert.Equal(t, spaceName, <-provs)
	roundTrip(t, ac, 1000)
}

func TestAutoDialFallsBackAtOnceWhenNothingListensOverRDMA(t *testing.T) {
	useSpaceProvider(t)
	// A host without a device: its listener is soft only.
	ln := listen(t, softConfig())
	provs := echoServer(t, ln, 1)
	// The RDMA attempt may take as long as it likes: only the peer's
	// answer (nothing listens there) can make the dial fall back.
	cfg := &Config{RDMAConnectTimeout: time.Hour}
	start := time.Now()
	c, err := dialCfg(t, cfg, ln.Addr().String(), 30*time.Second)
	require.NoError(t, err)
	took := time.Since(start)
	assert.Equal(t, ProviderSoft, c.Provider())
	assert.Equal(t, ProviderSoft, <-provs)
	var fb *FallbackError
	require.True(t, errors.As(c.Fallback(), &fb), "Fallback() = %v", c.Fallback())
	assert.Equal(t, spaceName, fb.Provider)
	assert.True(t, errors.Is(fb, syscall.ECONNREFUSED), "%v", fb)
	t.Logf("fallback on REJECTED (no listener): %v before soft was tried, dial took %v in all: %v", fb.Elapsed, took, fb)
	roundTrip(t, c, 5000)
}

func TestAutoDialFallsBackWhenThePeerIsSilentOverRDMA(t *testing.T) {
	sp := useSpaceProvider(t)
	ln := listenAuto(t, nil, 0)
	provs := echoServer(t, ln, 1)
	// The peer's RDMA side never answers, as a host whose RDMA stack drops
	// the connect request.
	sp.setSilent(ln.Addr().(*Addr).Port, true)
	cfg := &Config{RDMAConnectTimeout: 300 * time.Millisecond}
	start := time.Now()
	c, err := dialCfg(t, cfg, ln.Addr().String(), 30*time.Second)
	require.NoError(t, err)
	took := time.Since(start)
	assert.Equal(t, ProviderSoft, c.Provider())
	assert.Equal(t, ProviderSoft, <-provs)
	var fb *FallbackError
	require.True(t, errors.As(c.Fallback(), &fb), "Fallback() = %v", c.Fallback())
	assert.True(t, errors.Is(fb, context.DeadlineExceeded), "%v", fb)
	assert.GreaterOrEqual(t, fb.Elapsed, cfg.RDMAConnectTimeout, "fell back before the RDMA attempt's bound")
	t.Logf("fallback on silence: %v before soft was tried (bound %v), dial took %v in all", fb.Elapsed, cfg.RDMAConnectTimeout, took)
	roundTrip(t, c, 5000)

	// The caller's own bound wins when shorter: a timeout, no fallback.
	_, err = dialCfg(t, &Config{RDMAConnectTimeout: time.Hour}, ln.Addr().String(), 200*time.Millisecond)
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)

	// Negative RDMAConnectTimeout: rdmacore only, never soft.
	_, err = dialCfg(t, &Config{RDMAConnectTimeout: -1}, ln.Addr().String(), 500*time.Millisecond)
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
}

func TestAutoDialDoesNotFallBackWhenRefusedOverRDMA(t *testing.T) {
	sp := useSpaceProvider(t)
	// A soft listener that would accept, and at the same port an RDMA
	// listener (ours, on another host's device) that refuses: the refusal
	// is the answer, soft is not tried.
	ln := listen(t, softConfig())
	provs := echoServer(t, ln, 1)
	port := ln.Addr().(*Addr).Port
	ech, err := sp.CreateEventChannel()
	require.NoError(t, err)
	id, err := ech.CreateID()
	require.NoError(t, err)
	require.NoError(t, id.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}))
	require.NoError(t, id.Listen(8))
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		for {
			ev, err := ech.GetEvent(time.Time{})
			if err != nil {
				return
			}
			if ev.Type == verbs.EventConnectRequest {
				ev.ID.Reject(marshalReject(rejectNoRes))
				ev.ID.Destroy()
			}
		}
	}()
	t.Cleanup(func() {
		id.Destroy()
		ech.Close()
		<-stop
	})
	_, err = dialCfg(t, nil, ln.Addr().String(), 10*time.Second)
	require.Error(t, err)
	assert.True(t, errors.Is(err, errRefusedNoRes), "%v", err)

	// An explicit provider never falls back either.
	_, err = dialCfg(t, &Config{Provider: spaceName}, net.JoinHostPort("127.0.0.1", strconv.Itoa(sp.deadAddr.Port)), 10*time.Second)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "%v", err)

	// The soft listener is still there for soft dialers.
	c, err := dialCfg(t, softConfig(), ln.Addr().String(), 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ProviderSoft, <-provs)
	roundTrip(t, c, 10)
}

func TestMixedListenerPortCollisions(t *testing.T) {
	sp := useSpaceProvider(t)
	// A TCP port in use: the RDMA side may have it, the soft side not.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	bp := busy.Addr().(*net.TCPAddr).Port

	// Port 0: the first port the RDMA side picks is busy on TCP, so the
	// listener picks another that is free in both.
	sp.mu.Lock()
	sp.force = []int{bp}
	sp.mu.Unlock()
	ln := listenAuto(t, nil, 0)
	require.Len(t, ln.sides, 2)
	assert.NotEqual(t, bp, ln.Addr().(*Addr).Port)
	provs := echoServer(t, ln, 2)
	for _, cfg := range []*Config{softConfig(), nil} {
		c, err := dialCfg(t, cfg, ln.Addr().String(), 10*time.Second)
		require.NoError(t, err)
		roundTrip(t, c, 100)
		assert.Equal(t, c.Provider(), <-provs)
	}

	// An explicit port busy on TCP: an error that says how to do without
	// the soft side; RDMAOnly listens.
	lc := ListenConfig{}
	_, err = lc.Listen(context.Background(), "rdma", busy.Addr().String())
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.EADDRINUSE), "%v", err)
	assert.Contains(t, err.Error(), "RDMAOnly")
	lc.Config = &Config{RDMAOnly: true}
	l2, err := lc.Listen(context.Background(), "rdma", busy.Addr().String())
	require.NoError(t, err)
	l2.Close()
}
