package collectives

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

func TestMain(m *testing.M) {
	if os.Getenv(intruderEnv) != "" {
		os.Exit(intruderMain()) // secret_test.go's intruder, with an environment of its own
	}
	if os.Getenv(hostileEnv) != "" {
		os.Exit(hostileMain()) // hostile_test.go's silent host
	}
	testsupport.Main(m)
}

// mesh returns conns[i][j], rank i's end of the link to rank j.
type mesh func(t testing.TB, n int) [][]net.Conn

// pipeMesh links ranks with net.Pipe: unbuffered, so any algorithm in which
// a send waits for the peer's send deadlocks here.
func pipeMesh(t testing.TB, n int) [][]net.Conn {
	c := make([][]net.Conn, n)
	for i := range c {
		c[i] = make([]net.Conn, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			c[i][j], c[j][i] = net.Pipe()
		}
	}
	return c
}

// tcpMesh links ranks with TCP loopback conns.
func tcpMesh(t testing.TB, n int) [][]net.Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c := make([][]net.Conn, n)
	for i := range c {
		c[i] = make([]net.Conn, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			d, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			a, err := ln.Accept()
			require.NoError(t, err)
			c[i][j], c[j][i] = d, a
		}
	}
	return c
}

func newGroups(t testing.TB, n int, m mesh) []*Group {
	conns := m(t, n)
	gs := make([]*Group, n)
	for i := range gs {
		g, err := NewGroup(i, conns[i])
		require.NoError(t, err)
		gs[i] = g
	}
	t.Cleanup(func() { closeAll(gs) })
	return gs
}

// engines are the two ways a group moves data: over its conns, and
// through a same-host shared segment.
var engines = []string{"stream", "shm"}

// newEngineGroups makes n ranks on engine: "stream" over net.Pipes, "shm"
// over TCP conns on loopback with the segment set up as Join does (required).
func newEngineGroups(t testing.TB, n int, engine string) []*Group {
	switch engine {
	case "stream":
		return newGroups(t, n, pipeMesh)
	case "tcp":
		return newGroups(t, n, tcpMesh)
	}
	conns := tcpMesh(t, n)
	gs := make([]*Group, n)
	for i := range gs {
		g, err := NewGroup(i, conns[i])
		require.NoError(t, err)
		gs[i] = g
	}
	t.Cleanup(func() { closeAll(gs) })
	if n > 1 {
		mustAll(t, gs, func(g *Group) error { return attachShm(testCtx(t), g, conns[g.Rank()], "shm") })
	}
	return gs
}

// forEngines runs f on n fresh ranks of each engine.
func forEngines(t *testing.T, n int, f func(t *testing.T, gs []*Group)) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) { f(t, newEngineGroups(t, n, engine)) })
	}
}

// closeAll closes every rank's group at once, as separate processes would.
func closeAll(gs []*Group) {
	var wg sync.WaitGroup
	for _, g := range gs {
		if g != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.Close()
			}()
		}
	}
	wg.Wait()
}

// runAll runs f on every rank at once and returns each rank's error.
func runAll(gs []*Group, f func(g *Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(g)
		}()
	}
	wg.Wait()
	return errs
}

// mustAll runs f on every rank and fails the test on any error.
func mustAll(t testing.TB, gs []*Group, f func(g *Group) error) {
	t.Helper()
	for r, err := range runAll(gs, f) {
		require.NoError(t, err, "rank %d", r)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// splitmix64 gives reproducible pseudo-random test data.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func fill(b []byte, key uint64) {
	for i := range b {
		b[i] = byte(splitmix64(key + uint64(i)))
	}
}

func pattern(n int, key uint64) []byte {
	b := make([]byte, n)
	fill(b, key)
	return b
}

func keyOf(parts ...int) uint64 {
	var s uint64 = 1469598103934665603
	for _, p := range parts {
		s = splitmix64(s ^ uint64(p))
	}
	return s
}

func name(parts ...any) string { return fmt.Sprint(parts...) }
