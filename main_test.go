package rdma

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelper() // a peer process for the kill tests; never returns
	}
	goleak.VerifyTestMain(m)
}

// softConfig is the configuration of tests about the software provider:
// soft, whatever the environment says.
func softConfig() *Config { return &Config{Provider: ProviderSoft} }

// inVM reports whether the tests run inside the Soft-RoCE VM
// (scripts/softroce-test.sh), where the generic ones use the provider
// RDMA_PROVIDER names, on $SOFTROCE_IP (the RDMA CM cannot bind rxe to
// 127.0.0.1). Elsewhere they use soft on loopback.
func inVM() bool { return os.Getenv("SOFTROCE_DEV") != "" }

// testConfig is the configuration of the generic tests.
func testConfig() *Config {
	if inVM() {
		p := os.Getenv(ProviderEnv)
		if p == "" {
			p = ProviderRDMACore
		}
		return &Config{Provider: p}
	}
	return softConfig()
}

// testHost is the address tests listen on for cfg's provider.
func testHost(cfg *Config) string {
	if ip := os.Getenv("SOFTROCE_IP"); ip != "" && inVM() && cfg.Provider != ProviderSoft {
		return ip
	}
	return "127.0.0.1"
}

// listen starts a listener on a free port (nil cfg: testConfig).
func listen(t testing.TB, cfg *Config) *Listener {
	t.Helper()
	if cfg == nil {
		cfg = testConfig()
	}
	lc := ListenConfig{Config: cfg}
	ln, err := lc.Listen(context.Background(), "rdma", net.JoinHostPort(testHost(cfg), "0"))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.(*Listener)
}

// dial connects to ln.
func dial(t testing.TB, ln net.Listener, cfg *Config) *Conn {
	t.Helper()
	if cfg == nil {
		cfg = &Config{Provider: ln.(*Listener).Provider()}
	}
	d := Dialer{Config: cfg, Timeout: 10 * time.Second}
	c, err := d.Dial("rdma", ln.Addr().String())
	require.NoError(t, err)
	return c.(*Conn)
}

// pair returns both ends of one connection.
func pair(t testing.TB, cfg *Config) (client, server *Conn) {
	t.Helper()
	ln := listen(t, cfg)
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	client = dial(t, ln, cfg)
	r := <-ch
	require.NoError(t, r.err)
	server = r.c.(*Conn)
	t.Cleanup(func() {
		client.Close()
		server.Close()
	})
	return client, server
}
