package promrdma

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rdmanet/rdma"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tool finds one of Prometheus's programs (Debian's prometheus package
// has both; make deps installs it). With PROMRDMA_TOOLS=required (make
// test-ops sets it) a missing one fails the test, else skips it.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("PROMRDMA_TOOLS") == "required" {
			t.Fatalf("%s not found (make deps installs Debian's prometheus package): %v", name, err)
		}
		t.Skipf("%s not found (make deps installs Debian's prometheus package)", name)
	}
	return p
}

// serveMetrics opens a soft connection pair with a few bytes through it
// and serves a registry with the Collector on 127.0.0.1; it returns the
// metrics' URL. Everything ends with the test.
func serveMetrics(t *testing.T) string {
	cfg := &rdma.Config{Provider: rdma.ProviderSoft}
	ln, err := (&rdma.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	acc := make(chan net.Conn, 1)
	go func() {
		s, _ := ln.Accept()
		acc <- s
	}()
	c, err := (&rdma.Dialer{Config: cfg, Timeout: 10 * time.Second}).Dial("rdma", ln.Addr().String())
	require.NoError(t, err)
	s := <-acc
	require.NotNil(t, s)
	t.Cleanup(func() { c.Close(); s.Close() })
	_, err = c.Write(make([]byte, 1234))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 1234))
	require.NoError(t, err)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(NewCollector()))
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ml) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ml.Addr().String() + "/metrics"
}

// promtool check metrics passes what the Collector exports (names,
// units, _total on counters, help texts), as a scrape gets it.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := tool(t, "promtool")
	u := serveMetrics(t)
	resp, err := http.Get(u)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "rdma_connections_open{")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "promtool check metrics:\n%s", out)
	assert.Empty(t, string(out), "promtool has nothing to say")
}

// A real Prometheus server, on 127.0.0.1 only, scrapes the Collector and
// answers queries over what it scraped: the target is up, the open
// connections sum to the pair's two ends, the bytes are there. The server
// runs under a deadline and is stopped with the test.
func TestPrometheusScrape(t *testing.T) {
	bin := tool(t, "prometheus")
	target := serveMetrics(t)
	tu, err := url.Parse(target)
	require.NoError(t, err)

	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: rdma
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, tu.Host)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600))
	// A free port on 127.0.0.1 for the server's own web interface.
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	web := pl.Addr().String()
	pl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web,
		"--log.level=warn")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	query := func(q string) (float64, bool) {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" || len(r.Data.Result) != 1 {
			return 0, false
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		return v, err == nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if up, ok := query(`up{job="rdma"}`); ok && up == 1 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited: %v\n%s", err, log.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "prometheus scraped the target within a minute")
		time.Sleep(200 * time.Millisecond)
	}
	v, ok := query(`sum(rdma_connections_open{provider="soft"})`)
	require.True(t, ok)
	assert.GreaterOrEqual(t, v, 2.0, "the pair's two ends are open")
	v, ok = query(`rdma_bytes_total{direction="sent"}`)
	require.True(t, ok)
	assert.GreaterOrEqual(t, v, 1234.0)
	v, ok = query(`count(rdma_connections_open)`)
	require.True(t, ok)
	assert.Equal(t, 3.0, v, "a series per path")
}
