// Package conntest is the suite of rdma.Conn's behaviour as a net.Conn (and
// RsocketConn's, with Config.Wire "rsocket"), run on every verbs provider: what a program written against net.Conn relies
// on (nettest's conformance tests, deadlines, half-close, a peer that
// closes, dies or hangs, Close unblocking everything, errors shaped like
// package net's), the protocols people run over it (yamux, net/http, gRPC,
// TLS), and what a long-running server needs (no leaks across dial/close
// churn, no allocation per Read or Write). A provider's tests call Run; the
// test binary's TestMain must be testsupport.Main, which runs the peer
// processes the suite starts.
package conntest

import (
	"context"
	"net"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/rootstack"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/internal/zerocopy"
)

// Config says which provider to test, where, and what does not apply.
type Config struct {
	// RDMA is the configuration of every listener and dialer, an
	// rdma.Config (copied before use; the suite cannot import the root
	// package, which it reaches through internal/rootstack); its Provider
	// must name the provider under test.
	RDMA any
	// Host is the IP address listeners bind: 127.0.0.1 for soft, the RDMA
	// device's address inside the Soft-RoCE VM. The suite uses no other.
	Host string
	// PeerEnv is what a peer process (a re-run of the test binary) needs
	// in its environment to connect as this process does, e.g.
	// RDMA_SOFT_SHM=0.
	PeerEnv []string
	// Transport, if set, reports what carries a conn's bytes beneath its
	// provider (soft: "shm" or "tcp"); the suite then checks that conns,
	// in one process and across two, are carried by WantTransport.
	Transport     func(c net.Conn) string
	WantTransport string
	// Small sizes the work down (transfers, streams, requests, churn
	// cycles): for an emulated machine such as the Soft-RoCE VM, or for a
	// run over paths that full-size runs already cover.
	Small bool
	// DetectWithin bounds how long the survivor of a peer that was killed
	// or stopped may take to notice (default 10 s).
	DetectWithin time.Duration
	// Skip names subtests that do not apply to this provider, with the
	// reason.
	Skip map[string]string
	// Buffers runs the conns' Writes from and Reads into rdma.Buffers
	// (each copies through one) with the rendezvous threshold at
	// BuffersThreshold, so that every transfer of the suite from 4 KiB up
	// takes the zero-copy paths.
	Buffers bool
}

// Conn is what the suite needs of a conn beyond net.Conn: *rdma.Conn, and
// *rdma.RsocketConn with Config.Wire "rsocket", have it.
type Conn interface {
	net.Conn
	CloseWrite() error
	Provider() string
}

// BuffersThreshold is the rendezvous threshold of a run with Buffers. Not
// lower: a rendezvous Write returns once the peer has read it, so
// CloseWrite's subtest, which writes a small request and half-closes
// before its peer reads, would wait for ever (by design: see
// docs/wire.md, "Rendezvous").
const BuffersThreshold = 4 << 10

type suite struct {
	cfg   Config
	stack rootstack.Stack
	tuned rootstack.Tuning // cfg.RDMA's
}

// rdmaConfig is a copy of the configuration under test that a subtest
// tunes: rdma.Config's fields the suite changes, over the rest of it.
type rdmaConfig struct {
	base any
	rootstack.Tuning
}

// network is the root package's Network.
const network = "rdma"

var tests testsupport.Subtests[*suite]

// register adds subtests to the suite in the order given, each named by
// its function less the prefix "test" (testEcho runs as Echo), so that a
// subtest's name and its function's cannot part.
func register(fns ...func(t *testing.T, s *suite)) {
	for _, fn := range fns {
		full := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() // ".../conntest.testEcho"
		name, ok := strings.CutPrefix(full[strings.LastIndexByte(full, '.')+1:], "test")
		if !ok || name == "" {
			panic("conntest: a subtest's function must be named testName, not " + full)
		}
		tests.Add(name, fn)
	}
}

// Names lists the suite's subtests in the order Run runs them.
func Names() []string { return tests.Names() }

// Run runs the whole suite; each behaviour is a subtest.
func Run(t *testing.T, cfg Config) {
	stack := rootStack(t, cfg)
	require.NotNil(t, net.ParseIP(cfg.Host), "Config.Host %q is not an IP address", cfg.Host)
	if cfg.DetectWithin == 0 {
		cfg.DetectWithin = 10 * time.Second
	}
	known := map[string]bool{}
	for _, n := range Names() {
		known[n] = true
	}
	var unknown []string
	for n := range cfg.Skip {
		if !known[n] {
			unknown = append(unknown, n)
		}
	}
	sort.Strings(unknown)
	require.Empty(t, unknown, "Config.Skip names subtests the suite does not have")
	if cfg.Buffers {
		prev := zerocopy.SetRendezvousFloor(BuffersThreshold)
		defer zerocopy.SetRendezvousFloor(prev)
		tuned := stack.Tuning(cfg.RDMA)
		tuned.RendezvousThreshold = BuffersThreshold
		cfg.RDMA = stack.Tune(cfg.RDMA, tuned)
	}
	s := &suite{cfg: cfg, stack: stack, tuned: stack.Tuning(cfg.RDMA)}
	tests.Run(t, s, cfg.Skip)
}

// rootStack is the root package's stack, once cfg.RDMA is checked.
func rootStack(t testing.TB, cfg Config) rootstack.Stack {
	t.Helper()
	stack := rootstack.Root()
	require.NotNil(t, stack, "the root package, which sets the suite's stack at init, is not in the binary")
	require.IsType(t, stack.Tune(nil, rootstack.Tuning{}), cfg.RDMA, "Config.RDMA is an rdma.Config")
	require.NotEmpty(t, stack.Tuning(cfg.RDMA).Provider, "Config.RDMA.Provider names the provider under test")
	return stack
}

// scale is n, or n/div on a small machine (at least 1).
func (s *suite) scale(n, div int) int {
	if s.cfg.Small {
		return max(1, n/div)
	}
	return n
}

// config is a fresh copy of the configuration under test.
func (s *suite) config() *rdmaConfig {
	return &rdmaConfig{base: s.cfg.RDMA, Tuning: s.tuned}
}

// rdma is cfg (nil: the configuration under test) as an rdma.Config.
func (s *suite) rdma(cfg *rdmaConfig) any {
	if cfg == nil {
		cfg = s.config()
	}
	return s.stack.Tune(cfg.base, cfg.Tuning)
}

// listen starts a listener with cfg (nil: the configuration under test) on
// a free port, closed at cleanup.
func (s *suite) listen(t testing.TB, cfg *rdmaConfig) net.Listener {
	t.Helper()
	ln, err := s.stack.Listen(context.Background(), s.rdma(cfg), net.JoinHostPort(s.cfg.Host, "0"))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialer dials with cfg (nil: the configuration under test).
func (s *suite) dialer(cfg *rdmaConfig) func(addr string) (net.Conn, error) {
	c := s.rdma(cfg)
	return func(addr string) (net.Conn, error) {
		return s.stack.Dial(context.Background(), c, addr, time.Minute)
	}
}

// pair returns both ends of a conn made with cfg (nil: the configuration
// under test), closed at cleanup.
func (s *suite) pair(t testing.TB, cfg *rdmaConfig) (client, server Conn) {
	t.Helper()
	c, sv := testsupport.Connect(t, s.listen(t, cfg), s.dialer(cfg))
	client, server = s.wrap(c.(Conn)), s.wrap(sv.(Conn))
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// checkTransport checks what carries c, where the configuration says: a
// conn may move from one carrier to another in the background after it is
// set up (soft's shared memory), so it is given 10 s to get there.
func (s *suite) checkTransport(t testing.TB, c Conn) {
	t.Helper()
	if s.cfg.Transport != nil {
		var got string
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if got = s.cfg.Transport(unwrap(c)); got == s.cfg.WantTransport || time.Now().After(end) {
				break
			}
		}
		require.Equal(t, s.cfg.WantTransport, got, "what carries the conn's bytes")
	}
}

// checkOpError checks that err is a *net.OpError of op on network "rdma".
func checkOpError(t testing.TB, err error, op string) {
	t.Helper()
	var oe *net.OpError
	require.ErrorAs(t, err, &oe, "%T %v", err, err)
	require.Equal(t, op, oe.Op, "%v", err)
	require.Equal(t, "rdma", oe.Net, "%v", err)
}
