package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs/soft"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// softConfig is the configuration of the package's own tests: soft,
// whatever the environment says, on loopback. rdma.Conn's behaviour on
// every provider is internal/conntest's suite (conn_suite_test.go here, and
// verbs/rdmacore's tests in the Soft-RoCE VM).
func softConfig() *Config { return &Config{Provider: ProviderSoft} }

// listen starts a listener on a free loopback port (nil cfg: softConfig).
func listen(t testing.TB, cfg *Config) *Listener {
	t.Helper()
	if cfg == nil {
		cfg = softConfig()
	}
	lc := ListenConfig{Config: cfg}
	ln, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.(*Listener)
}

// dialer dials with cfg (nil: the listener's provider).
func dialer(ln net.Listener, cfg *Config) func(addr string) (net.Conn, error) {
	if cfg == nil {
		cfg = &Config{Provider: ln.(*Listener).Provider()}
	}
	d := Dialer{Config: cfg, Timeout: 10 * time.Second}
	return func(addr string) (net.Conn, error) { return d.Dial("rdma", addr) }
}

// dial connects to ln.
func dial(t testing.TB, ln net.Listener, cfg *Config) *Conn {
	t.Helper()
	c, err := dialer(ln, cfg)(ln.Addr().String())
	require.NoError(t, err)
	return c.(*Conn)
}

// pair returns both ends of one connection.
func pair(t testing.TB, cfg *Config) (client, server *Conn) {
	t.Helper()
	ln := listen(t, cfg)
	c, s := testsupport.Connect(t, ln, dialer(ln, cfg))
	return c.(*Conn), s.(*Conn)
}

// softTransports runs f once per path soft has between two ends on one
// host: shared memory (its default) and TCP. env is what a peer process
// needs in its environment to match.
func softTransports(t *testing.T, f func(t *testing.T, env []string)) {
	t.Run("shm", func(t *testing.T) {
		prev := soft.SetSharedMemory(true)
		defer soft.SetSharedMemory(prev)
		f(t, []string{"RDMA_SOFT_SHM=1"})
	})
	t.Run("tcp", func(t *testing.T) {
		prev := soft.SetSharedMemory(false)
		defer soft.SetSharedMemory(prev)
		f(t, []string{"RDMA_SOFT_SHM=0"})
	})
}
