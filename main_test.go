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

// softConfig is the configuration of every test connection: the software
// provider, whatever the environment says.
func softConfig() *Config { return &Config{Provider: ProviderSoft} }

// listen starts a soft listener on a free loopback port.
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

// dial connects to ln.
func dial(t testing.TB, ln net.Listener, cfg *Config) *Conn {
	t.Helper()
	if cfg == nil {
		cfg = softConfig()
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
