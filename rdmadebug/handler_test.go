package rdmadebug

import (
	"context"
	"encoding/json"
	"expvar"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// goleak checks that the churn leaves no goroutine (http's idle
// connections are closed by each test).
func TestMain(m *testing.M) { testsupport.Main(m, goleak.IgnoreCurrent()) }

var softCfg = &rdma.Config{Provider: rdma.ProviderSoft}

// pairs opens n connections to ln and returns both ends of each.
func pairs(t *testing.T, ln net.Listener, n int) []net.Conn {
	d := rdma.Dialer{Config: softCfg, Timeout: 10 * time.Second}
	var out []net.Conn
	for range n {
		acc := make(chan net.Conn, 1)
		go func() {
			s, _ := ln.Accept()
			acc <- s
		}()
		c, err := d.Dial("rdma", ln.Addr().String())
		require.NoError(t, err)
		s := <-acc
		require.NotNil(t, s)
		out = append(out, c, s)
	}
	return out
}

func get(t *testing.T, srv *httptest.Server, query, accept string) string {
	req, err := http.NewRequest("GET", srv.URL+"/debug/rdma"+query, nil)
	require.NoError(t, err)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return string(b)
}

// jsonConn is a connection as the handler's JSON names it.
type jsonConn struct {
	ID                 uint64 `json:"id"`
	ListenerID         uint64 `json:"listener_id"`
	LocalAddr          string `json:"local_addr"`
	RemoteAddr         string `json:"remote_addr"`
	Path               string `json:"path"`
	RTT                string `json:"rtt"`
	BytesSent          uint64 `json:"bytes_sent"`
	BytesReceived      uint64 `json:"bytes_received"`
	RemoteWrites       uint64 `json:"remote_writes"`
	RemoteBytesWritten uint64 `json:"remote_bytes_written"`
	RemoteReads        uint64 `json:"remote_reads"`
	RemoteBytesRead    uint64 `json:"remote_bytes_read"`
}

type jsonPage struct {
	Conns     []jsonConn `json:"conns"`
	Next      uint64     `json:"next"`
	Listeners []struct {
		ID       uint64 `json:"id"`
		Addr     string `json:"addr"`
		Accepted uint64 `json:"accepted"`
		Open     int    `json:"open"`
	} `json:"listeners"`
}

func jsonConns(t *testing.T, body string) map[string]jsonConn {
	var page jsonPage
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	m := map[string]jsonConn{}
	for _, c := range page.Conns {
		m[c.LocalAddr+" "+c.RemoteAddr] = c
	}
	return m
}

// serveDebug returns a soft listener and a server with the handler at
// /debug/rdma, both closed when the test ends.
func serveDebug(t *testing.T) (net.Listener, *httptest.Server) {
	lc := rdma.ListenConfig{Config: softCfg}
	ln, err := lc.Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	mux := http.NewServeMux()
	mux.Handle("/debug/rdma", Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
	})
	return ln, srv
}

// The handler lists every open connection, as text and as JSON, with the
// counters of what went through it, and drops each once closed; many
// opened and closed leave none behind, and no goroutine.
func TestHandlerListsOpenConns(t *testing.T) {
	ln, srv := serveDebug(t)

	base := len(rdma.OpenConnStats())
	for round := range 5 {
		conns := pairs(t, ln, 10)
		// Each dialer writes its index+1 bytes, its peer reads them.
		for i := 0; i < len(conns); i += 2 {
			_, err := conns[i].Write(make([]byte, i/2+1))
			require.NoError(t, err)
			_, err = io.ReadFull(conns[i+1], make([]byte, i/2+1))
			require.NoError(t, err)
		}
		text := get(t, srv, "?limit=10000", "")
		js := jsonConns(t, get(t, srv, "?format=json&limit=10000", ""))
		js2 := jsonConns(t, get(t, srv, "?limit=10000", "application/json"))
		assert.Equal(t, len(js), len(js2))
		for i, c := range conns {
			key := c.LocalAddr().String() + " " + c.RemoteAddr().String()
			assert.Contains(t, text, c.LocalAddr().String(), "round %d: text lists conn %d", round, i)
			s, ok := js[key]
			require.True(t, ok, "round %d: JSON lists conn %d", round, i)
			want := uint64(i/2 + 1)
			if i%2 == 0 {
				assert.Equal(t, want, s.BytesSent)
			} else {
				assert.Equal(t, want, s.BytesReceived)
			}
		}
		assert.NotContains(t, text, "FAILED", "no conn failed")
		assert.Contains(t, text, "bytes_sent:")
		assert.Contains(t, text, "soft-")
		// The dialers close first: their peers end in order, not failed.
		for i := 0; i < len(conns); i += 2 {
			require.NoError(t, conns[i].Close())
		}
		for i := 1; i < len(conns); i += 2 {
			_, err := conns[i].Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF)
		}
		text = get(t, srv, "", "")
		assert.NotContains(t, text, "FAILED", "a conn whose peer closed did not fail")
		for i := 1; i < len(conns); i += 2 {
			require.NoError(t, conns[i].Close())
		}
		text = get(t, srv, "?limit=10000", "")
		js = jsonConns(t, get(t, srv, "?format=json&limit=10000", ""))
		for _, c := range conns {
			assert.NotRegexp(t, regexp.QuoteMeta(c.LocalAddr().String())+" +"+regexp.QuoteMeta(c.RemoteAddr().String()), text, "closed conns are not listed")
			_, ok := js[c.LocalAddr().String()+" "+c.RemoteAddr().String()]
			assert.False(t, ok)
		}
	}
	assert.Equal(t, base, len(rdma.OpenConnStats()), "the registry holds no closed conn")
	assert.GreaterOrEqual(t, rdma.ReadProcessStats().Totals.Closed, uint64(100))
}

// The expvar variable holds the process's totals as the handler's JSON.
func TestExpvar(t *testing.T) {
	v := expvar.Get("rdma")
	require.NotNil(t, v)
	var ps struct {
		Totals struct {
			Opened *uint64 `json:"opened"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal([]byte(v.String()), &ps))
	assert.NotContains(t, v.String(), `"Totals"`)
	assert.NotContains(t, v.String(), "null")
}

// A connection's one-sided operations show in its text line and its JSON,
// and the process's soft engine counters in theirs.
func TestHandlerRemoteAndSoft(t *testing.T) {
	ln, srv := serveDebug(t)

	conns := pairs(t, ln, 1)
	c, s := conns[0].(*rdma.Conn), conns[1].(*rdma.Conn)
	defer c.Close()
	defer s.Close()
	target, err := rdma.AllocBuffer(4096)
	require.NoError(t, err)
	defer target.Free()
	local, err := rdma.AllocBuffer(4096)
	require.NoError(t, err)
	defer local.Free()
	d, err := s.Expose(target, 0, 4096, rdma.AccessRead|rdma.AccessWrite)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, c.WriteRemote(d, 0, local.Bytes()[:10]))
	}
	require.NoError(t, c.ReadRemote(d, 0, local.Bytes()[:30]))

	text := get(t, srv, "?limit=10000", "")
	assert.Contains(t, text, "\t remote_writes:2 remote_bytes_written:20 remote_reads:1 remote_bytes_read:30 notifies_sent:0 notifies_received:0 exposures:0 exposed:0\n")
	assert.Contains(t, text, "\t remote_writes:0 remote_bytes_written:0 remote_reads:0 remote_bytes_read:0 notifies_sent:0 notifies_received:0 exposures:1 exposed:1\n")
	assert.Contains(t, text, "\nsoft: rnr_naks_sent:")
	assert.Contains(t, text, "\nrdma: one-sided: remote_writes:")

	body := get(t, srv, "?format=json&limit=10000", "")
	js := jsonConns(t, body)
	cs := js[c.LocalAddr().String()+" "+c.RemoteAddr().String()]
	assert.Equal(t, [4]uint64{2, 20, 1, 30}, [4]uint64{cs.RemoteWrites, cs.RemoteBytesWritten, cs.RemoteReads, cs.RemoteBytesRead})
	var raw struct {
		Process struct {
			Soft map[string]uint64 `json:"soft"`
		} `json:"process"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	assert.NotNil(t, raw.Process.Soft, "the soft engine's counters, an object even when all are zero")
}
