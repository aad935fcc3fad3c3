package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a server process when the bench runs it
// as one.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "server" {
		os.Exit(serveMain())
	}
	os.Exit(m.Run())
}

// TestSmoke runs every workload briefly on both soft paths, over rdma and
// TCP: each answer is checked by the workloads themselves, and the report
// must hold a row for each workload, path and transport, with operations,
// CPU time and latencies.
func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	o, err := parseOptions([]string{"-rounds", "1", "-t", "25ms", "-warm", "5ms", "-keys", "20",
		"-raft-entries", "60", "-raft-timeout", "100ms", "-raft-idle", "10ms", "-q",
		"-json", filepath.Join(dir, "r.json"), "-svg", filepath.Join(dir, "r.svg")}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := run(ctx, o, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.write(o, &out); err != nil {
		t.Fatal(err)
	}
	names := []string{"raft-apply", "raft-failover"}
	for _, w := range workloads() {
		names = append(names, w.name)
	}
	var back report
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"shm", "tcp"} {
		for _, n := range names {
			for _, tn := range []string{"rdma", "tcp"} {
				found := false
				for _, r := range back.Summary {
					if r.Workload != n || r.Path != path || r.Transport != tn {
						continue
					}
					found = true
					if r.Ops <= 0 || r.OpsPerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
						t.Errorf("%s %s %s: ops %d, %.0f/s, p50 %.1f, p99 %.1f", n, path, tn, r.Ops, r.OpsPerSec, r.P50, r.P99)
					}
					if n != "raft-failover" && r.CPUPerOp <= 0 {
						t.Errorf("%s %s %s: no CPU time per op", n, path, tn)
					}
					if tn == "rdma" && r.Ratio <= 0 {
						t.Errorf("%s %s: no rdma/TCP ratio", n, path)
					}
					if wantBy := map[bool]string{true: "p50"}[n == "redis-get-quiet"]; tn == "rdma" && r.RatioBy != wantBy {
						t.Errorf("%s %s: ratio by %q, want %q", n, path, r.RatioBy, wantBy)
					}
				}
				if !found {
					t.Errorf("no summary row for %s on %s over %s", n, path, tn)
				}
			}
		}
	}
	if !strings.Contains(out.String(), "redis-get-p100-c4") {
		t.Errorf("the table lacks the workloads:\n%s", out.String())
	}
	if svg, err := os.ReadFile(filepath.Join(dir, "r.svg")); err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("yamux-s64")) {
		t.Errorf("the plot: %v\n%s", err, svg)
	}
}

// corruptConn changes what the server writes (f, in place) before it
// goes out.
type corruptConn struct {
	net.Conn
	f func([]byte)
}

func (c corruptConn) Write(b []byte) (int, error) {
	b = bytes.Clone(b)
	c.f(b)
	return c.Conn.Write(b)
}

type corruptListener struct {
	net.Listener
	f func([]byte)
}

func (l corruptListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return corruptConn{c, l.f}, nil
}

// TestWrongAnswersFail: a server that answers wrong values fails each
// workload's run with an error that says what differed.
func TestWrongAnswersFail(t *testing.T) {
	flipLast := func(min int) func([]byte) {
		return func(b []byte) {
			if len(b) >= min {
				b[len(b)-1] ^= 0x20
			}
		}
	}
	cases := []struct {
		w    workload
		f    func([]byte)
		want string
	}{
		{redisWorkload("redis-get-p100", "get", 100, 2), func(b []byte) { copy(b, bytes.ReplaceAll(b, []byte("v:"), []byte("w:"))) }, "GET"},
		{redisWorkload("redis-get", "get", 1, 2), func(b []byte) { copy(b, bytes.ReplaceAll(b, []byte("v:"), []byte("w:"))) }, "GET"},
		{httpWorkload("http", 1<<10, 2), flipLast(1 << 10), "body differs"},
		{yamuxWorkload("yamux", 1<<10, 2), flipLast(1 << 10), "differs"},
	}
	for _, c := range cases {
		t.Run(c.w.name, func(t *testing.T) {
			tr, err := newTransport("tcp", "", "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			ln, err := tr.listen()
			if err != nil {
				t.Fatal(err)
			}
			stop, err := serveFuncs[c.w.service](corruptListener{ln, c.f})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := stop(); err != nil {
					t.Error(err)
				}
			}()
			ctx := context.Background()
			m, err := c.w.prepare(ctx, scale{keys: 10}, tr, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer m.close()
			_, err = runWorkers(ctx, m, time.Now().Add(200*time.Millisecond), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run against a corrupting server: %v, want an error with %q", err, c.want)
			}
		})
	}
}
