package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/verbs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every test here runs on the software provider, on loopback, for a few
// hundred milliseconds at most.

func runArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, append([]string{"-provider", "soft"}, args...), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestLoopbackTable(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "perf.json")
	out, _, err := runArgs(t, "-loopback", "-t", "100ms", "-warmup", "20ms", "-sizes", "64,64K", "-q", "-json-file", jsonPath)
	require.NoError(t, err)
	t.Log("\n" + out)
	// -json-file writes the same run as JSON beside the table.
	js, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(js, &rep), string(js))
	require.Len(t, rep.Results, 8)
	assert.Contains(t, out, "stream bandwidth, client -> server")
	assert.Contains(t, out, "round-trip latency")
	lines := strings.Split(out, "\n")
	var rows []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && (f[0] == "64" || f[0] == "64K") && (f[1] == "rdma/soft" || f[1] == "tcp") {
			rows = append(rows, l)
		}
	}
	// 2 tests x 2 sizes x 2 transports.
	require.Len(t, rows, 8, out)
	for _, r := range rows {
		f := strings.Fields(r)
		if f[1] == "rdma/soft" {
			assert.Regexp(t, `^\d+\.\d\dx$`, f[len(f)-1], "rdma rows carry the ratio to tcp: %s", r)
		} else {
			assert.Equal(t, "-", f[len(f)-1], r)
		}
	}
	// The columns line up: every row of a table is as long as its heading.
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "size") {
			for _, r := range lines[i+1:] {
				if r == "" {
					break
				}
				assert.Equal(t, len(l), len(r), "misaligned row %q under %q", r, l)
			}
		}
	}
}

func TestLoopbackJSON(t *testing.T) {
	out, _, err := runArgs(t, "-loopback", "-json", "-n", "50", "-warmup", "0", "-P", "2", "-rounds", "2", "-sizes", "100")
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "rdmaperf", rep.Tool)
	assert.Equal(t, "loopback", rep.Mode)
	assert.Equal(t, "in-process", rep.Server)
	assert.Equal(t, 2, rep.Parallel)
	assert.Equal(t, int64(50), rep.Iterations)
	require.Len(t, rep.Results, 4)
	for _, res := range rep.Results {
		assert.Equal(t, 100, res.Size)
		require.Len(t, res.Rounds, 2)
		for _, m := range res.Rounds {
			// -n counts messages per connection.
			assert.Equal(t, int64(2*50), m.Messages)
			assert.Equal(t, int64(2*50*100), m.Bytes)
			assert.Positive(t, m.BytesPerSec)
		}
		switch res.Transport {
		case "rdma":
			assert.Equal(t, "soft", res.Provider)
			require.NotNil(t, res.VsTCP)
			// The ratio is rdma's median over tcp's, same test and size.
			tcp := findResult(t, rep.Results, res.Test, res.Size, "tcp")
			want := res.Median.BytesPerSec / tcp.Median.BytesPerSec
			if res.Test == "latency" {
				want = float64(res.Median.P50Ns) / float64(tcp.Median.P50Ns)
			}
			assert.InEpsilon(t, want, *res.VsTCP, 1e-9, "%s vs tcp", res.Test)
			assert.Equal(t, map[string]string{"stream": "bytes_per_sec", "latency": "p50_ns"}[res.Test], res.VsTCPOf)
			// The client conns' statistics: a stream's message is one
			// data write, a round trip two (the control header and its
			// answers add a few).
			for _, m := range append(res.Rounds, res.Median) {
				require.NotNil(t, m.Conn)
				assert.Contains(t, []string{"soft-shm", "soft-tcp"}, m.Conn.Path)
				assert.InDelta(t, map[string]float64{"stream": 1, "latency": 2}[res.Test], m.Conn.WireMsgsPerMsg, 0.1, res.Test)
				assert.Zero(t, m.Conn.RndvPerMsg, "copying Writes: no rendezvous")
			}
			for _, m := range res.Rounds {
				c := m.Conn
				if res.Test == "latency" {
					assert.InDelta(t, 1, c.ReadsAtOnce+c.ReadsHanded+c.ReadsSpun+c.ReadsSlept, 1e-9, "read shares")
				}
			}
		case "tcp":
			assert.Empty(t, res.Provider)
			assert.Nil(t, res.VsTCP)
			assert.Nil(t, res.Median.Conn)
		default:
			t.Errorf("transport %q", res.Transport)
		}
		if res.Test == "latency" {
			m := res.Median
			assert.Positive(t, m.MinNs)
			assert.LessOrEqual(t, m.MinNs, m.P50Ns)
			assert.LessOrEqual(t, m.P50Ns, m.P99Ns)
			assert.LessOrEqual(t, m.P99Ns, m.P999Ns)
			assert.LessOrEqual(t, m.P999Ns, m.MaxNs)
		} else {
			assert.Equal(t, "stream", res.Test)
			assert.Zero(t, res.Median.P50Ns)
		}
	}
}

func TestLoopbackFork(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	out, _, err := runArgs(t, "-loopback", "-fork", "-json", "-n", "20", "-warmup", "0", "-sizes", "4K", "-cpuprofile", prof)
	require.NoError(t, err)
	for _, p := range []string{prof, prof + ".server"} {
		st, err := os.Stat(p)
		require.NoError(t, err, "both processes write a CPU profile")
		assert.Positive(t, st.Size(), p)
	}
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "separate process", rep.Server)
	require.Len(t, rep.Results, 4)
	for _, res := range rep.Results {
		assert.Equal(t, int64(20), res.Median.Messages)
		assert.Positive(t, res.Median.ClientCPU)
		assert.Positive(t, res.Median.ServerCPU, "the server process reports its CPU time")
		assert.Positive(t, res.Median.ClientCPUPerMsgNs)
		assert.Positive(t, res.Median.ServerCPUPerMsgNs)
	}
}

// The server's CPU per message is its CPU time over the messages it saw,
// warm-up included; with several connections, the whole process's over
// all of them.
func TestAggregateCPUPerMessage(t *testing.T) {
	ws := []worker{
		{msgs: 90, warmMsgs: 10, server: serverResult{Bytes: 100 * 64, CPU: 3 * time.Millisecond}},
		{msgs: 190, warmMsgs: 10, server: serverResult{Bytes: 200 * 64, CPU: 3 * time.Millisecond}},
	}
	m := aggregate(ws, 64)
	assert.Equal(t, int64(10_000), m.ServerCPUPerMsgNs)
	assert.Equal(t, int64(280), m.Messages)
}

// A cancelled run (SIGINT) stops at once, however long it was meant to be.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := run(ctx, []string{"-provider", "soft", "-loopback", "-t", "10m", "-q", "-P", "2"}, io.Discard, io.Discard)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 30*time.Second)
}

// findResult returns the result of test and size over transport.
func findResult(t *testing.T, results []result, test string, size int, transport string) result {
	t.Helper()
	for _, r := range results {
		if r.Test == test && r.Size == size && r.Transport == transport {
			return r
		}
	}
	t.Fatalf("no %s result for %s size %d", transport, test, size)
	return result{}
}

// -provider rdmacore runs on rdma-core where a device with an active port
// is, else fails saying how to use soft.
func TestProviderRDMACore(t *testing.T) {
	out, _, err := runArgs(t, "-loopback", "-provider", "rdmacore", "-n", "5", "-warmup", "0", "-q", "-json", "-baseline", "none")
	if !hasRDMACoreDevice() {
		require.Error(t, err, "no rdmacore device with an active port here, yet the run succeeded:\n%s", out)
		assert.ErrorIs(t, err, verbs.ErrNoDevice)
		assert.Contains(t, err.Error(), "use the software provider instead")
		return
	}
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.NotEmpty(t, rep.Results)
	for _, res := range rep.Results {
		assert.Equal(t, "rdma", res.Transport)
		assert.Equal(t, "rdmacore", res.Provider, "%s size %d", res.Test, res.Size)
		assert.Equal(t, int64(5), res.Median.Messages)
	}
}

// hasRDMACoreDevice reports whether the rdmacore provider sees a device with
// an active port, asked directly of the provider rather than through rdma.
func hasRDMACoreDevice() bool {
	p, err := verbs.Lookup("rdmacore")
	if err != nil {
		return false
	}
	devs, err := p.Devices()
	if err != nil {
		return false
	}
	for _, d := range devs {
		ctx, err := p.Open(d.Name)
		if err != nil {
			continue
		}
		attr, err := ctx.QueryPort(1)
		_ = ctx.Close()
		if err == nil && (attr.State == verbs.PortActive || attr.State == verbs.PortActiveDefer) {
			return true
		}
	}
	return false
}

func TestProgressOnLongRuns(t *testing.T) {
	var errOut bytes.Buffer
	p := newProgress(&errOut, true, 2, true, 2*time.Second)
	p.begin("stream size=64K over rdma, round 1/1")
	p.done("stream size=64K over rdma, round 1/1", kindStream, measure{BytesPerSec: 100 << 20})
	p.begin("latency size=64 over rdma, round 1/1")
	p.done("latency size=64 over rdma, round 1/1", kindLatency, measure{P50Ns: 20000, P99Ns: 90000})
	p.stop()
	assert.Contains(t, errOut.String(), "test 1/2 stream size=64K over rdma, round 1/1: 100.0 MiB/s")
	assert.Contains(t, errOut.String(), "test 2/2 latency size=64 over rdma, round 1/1: p50 20.00us p99 90.00us")

	// A short run stays quiet, and so does -q.
	errOut.Reset()
	p = newProgress(&errOut, true, 2, true, 100*time.Millisecond)
	p.done("x", kindStream, measure{})
	p.stop()
	p = newProgress(&errOut, false, 2, true, time.Hour)
	p.done("x", kindStream, measure{})
	p.stop()
	assert.Empty(t, errOut.String())
}

// testServer starts a server like -s does, on free loopback ports.
func testServer(t *testing.T) (*server, *syncBuffer) {
	t.Helper()
	o, err := parseOptions([]string{"-s", "-provider", "soft", "-addr", "127.0.0.1:0", "-tcp-addr", "127.0.0.1:0"}, io.Discard)
	require.NoError(t, err)
	log := &syncBuffer{}
	s, err := listen(context.Background(), o, o.tcpAddr, log)
	require.NoError(t, err)
	t.Cleanup(s.close)
	return s, log
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestServerBadHeader(t *testing.T) {
	s, log := testServer(t)
	o := &options{provider: "soft"}
	for _, tr := range []transport{rdmaTransport(o, s.rdmaAddr()), tcpTransport(s.tcpAddr(), "")} {
		t.Run(tr.name, func(t *testing.T) {
			ctx := context.Background()
			// Not rdmaperf at all: an error reply naming the problem.
			c, err := tr.dial(ctx, tr.addr)
			require.NoError(t, err)
			_, err = c.Write([]byte(strings.Repeat("GET / HTTP/1.0\r\n", 2)))
			require.NoError(t, err)
			err = readReply(c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the server refused the test: bad control header: magic \"GET \"")
			c.Close()

			// A well-formed header asking for too much.
			c, err = tr.dial(ctx, tr.addr)
			require.NoError(t, err)
			b := goodHeader()
			b[8] = 0xff
			_, err = c.Write(b[:])
			require.NoError(t, err)
			err = readReply(c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "out of range")
			c.Close()

			// Half a header, then gone.
			c, err = tr.dial(ctx, tr.addr)
			require.NoError(t, err)
			_, err = c.Write([]byte("RPRF\x01"))
			require.NoError(t, err)
			c.Close()

			// The server still serves a real client.
			m, _, err := runTest(ctx, tr, testSpec{kind: kindLatency, size: 64, parallel: 1, iterations: 10})
			require.NoError(t, err)
			assert.Equal(t, int64(10), m.Messages)
			m, _, err = runTest(ctx, tr, testSpec{kind: kindStream, size: 1000, parallel: 2, iterations: 10})
			require.NoError(t, err)
			assert.Equal(t, int64(2*10*1000), m.Bytes)
		})
	}
	require.Eventually(t, func() bool { return strings.Count(log.String(), "no control header") == 2 },
		10*time.Second, 10*time.Millisecond, log.String())
	assert.Contains(t, log.String(), "is not rdmaperf's")
	assert.Contains(t, log.String(), ": latency 64: 640 bytes in")
}

// A client pointed at something that is not an rdmaperf server says so.
func TestClientAgainstOtherServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n")
		c.Close()
	}()
	_, _, err = runTest(context.Background(), tcpTransport(ln.Addr().String(), ""),
		testSpec{kind: kindLatency, size: 64, parallel: 1, iterations: 1})
	<-done
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not an rdmaperf server")
}

func TestClientNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, _, err = runArgs(t, "-c", addr, "-n", "1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rdma")
}

// The latency loop's round trip and recording allocate nothing, over rdma
// and over TCP.
func TestLatencyLoopAllocatesNothing(t *testing.T) {
	s, _ := testServer(t)
	o := &options{provider: "soft"}
	for _, tr := range []transport{rdmaTransport(o, s.rdmaAddr()), tcpTransport(s.tcpAddr(), "")} {
		t.Run(tr.name, func(t *testing.T) {
			c, err := tr.dial(context.Background(), tr.addr)
			require.NoError(t, err)
			defer c.Close()
			if tr.name == "rdma" {
				require.IsType(t, &rdma.Conn{}, c)
			}
			var hb [headerLen]byte
			(&header{Kind: kindLatency, Size: 64}).marshal(&hb)
			_, err = c.Write(hb[:])
			require.NoError(t, err)
			require.NoError(t, readReply(c))
			out, in := make([]byte, 64), make([]byte, 64)
			h := newHist()
			for range 100 { // warm up: buffers, credits, poller
				require.NoError(t, roundTrip(c, out, in))
			}
			var rtErr error
			allocs := testing.AllocsPerRun(500, func() {
				t0 := time.Now()
				if err := roundTrip(c, out, in); err != nil {
					rtErr = err
				}
				h.record(time.Since(t0))
			})
			require.NoError(t, rtErr)
			assert.Zero(t, allocs)
		})
	}
}

func TestServerMode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-s", "-provider", "soft", "-addr", "127.0.0.1:0", "-tcp-addr", "127.0.0.1:0"}, out, io.Discard)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "rdmaperf server: rdma on 127.0.0.1:") },
		10*time.Second, 10*time.Millisecond)
	assert.Contains(t, out.String(), "(provider soft), TCP baseline on 127.0.0.1:")
	cancel()
	require.NoError(t, <-errc)
}

// With -buffers a stream of messages past the rendezvous threshold (soft's
// default on either of its paths) takes the zero-copy path: one rendezvous
// a message, no data writes but the test's own control messages.
func TestLoopbackBuffersRendezvous(t *testing.T) {
	out, _, err := runArgs(t, "-loopback", "-json", "-buffers", "-test", "stream", "-n", "20", "-warmup", "0",
		"-rounds", "1", "-sizes", "1M", "-baseline", "none")
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.Results, 1)
	c := rep.Results[0].Median.Conn
	require.NotNil(t, c)
	assert.InDelta(t, 1, c.RndvPerMsg, 0.05, "one rendezvous a message")
	assert.Less(t, c.WireMsgsPerMsg, 0.5, "no data writes but the test's control messages")
}

// -tcp-cc gives the TCP baseline that congestion control, and the report
// says which one the baseline ran with; one the kernel does not have fails
// the run with the flag's name in the error.
func TestLoopbackTCPCongestionControl(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("per-socket congestion control is Linux's")
	}
	out, _, err := runArgs(t, "-loopback", "-json", "-test", "latency", "-n", "20", "-warmup", "0",
		"-rounds", "1", "-sizes", "64", "-tcp-cc", "reno")
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "reno", rep.TCPCC)
	require.Len(t, rep.Results, 2, "rdma and the TCP baseline")

	_, _, err = runArgs(t, "-loopback", "-test", "latency", "-n", "20", "-warmup", "0",
		"-rounds", "1", "-sizes", "64", "-q", "-tcp-cc", "no-such-algorithm")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-tcp-cc no-such-algorithm")
}
