package rdmadebug

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/verbs/soft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func status(t *testing.T, srv interface {
	Client() *http.Client
}, url string) (int, string) {
	resp, err := srv.Client().Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// listenerID is the id the JSON gives the listener on addr.
func listenerID(t *testing.T, body, addr string) uint64 {
	var page jsonPage
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	for _, l := range page.Listeners {
		if l.Addr == addr {
			return l.ID
		}
	}
	t.Fatalf("no listener %s in %s", addr, body)
	return 0
}

// The text is a table in the manner of ss: a header row, the listener
// with its accept queue and accepted count, each connection with its id,
// Recv-Q (bytes not read yet), its listener (or - for a dialed one) and
// its counters with the transport's rtt; it ends in a newline. One
// connection is found by its id, as text and as JSON.
func TestHandlerTableAndByID(t *testing.T) {
	ln, srv := serveDebug(t)
	conns := pairs(t, ln, 2)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The first accepted end has 5 bytes waiting.
	_, err := conns[0].Write([]byte("hello"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return conns[1].(*rdma.Conn).Stats().Buffered == 5 }, 5*time.Second, time.Millisecond)

	body := get(t, srv, "?format=json&limit=10000", "")
	lid := listenerID(t, body, ln.Addr().String())
	js := jsonConns(t, body)
	dialed := js[conns[0].LocalAddr().String()+" "+conns[0].RemoteAddr().String()]
	accepted := js[conns[1].LocalAddr().String()+" "+conns[1].RemoteAddr().String()]
	require.NotZero(t, dialed.ID)
	require.NotZero(t, accepted.ID)
	assert.NotEqual(t, dialed.ID, accepted.ID)
	assert.Zero(t, dialed.ListenerID, "a dialed conn has no listener")
	assert.Equal(t, lid, accepted.ListenerID)
	if accepted.Path == "soft-tcp" {
		d, err := time.ParseDuration(accepted.RTT)
		require.NoError(t, err, "rtt is a duration with its unit: %q", accepted.RTT)
		assert.Positive(t, d)
	}

	text := get(t, srv, "?limit=10000", "")
	require.True(t, strings.HasSuffix(text, "\n"), "the text ends in a newline")
	assert.Regexp(t, `(?m)^ID +State +Recv-Q +Send-Q +Local Address:Port +Provider +Wire +Accepted +Open +Age$`, text)
	assert.Regexp(t, `(?m)^ID +State +Recv-Q +Send-Q +Local Address:Port +Peer Address:Port +Provider +Path +Listener$`, text)
	assert.Regexp(t, fmt.Sprintf(`(?m)^%d +LISTEN +0 +\d+ +%s +soft +stream +[1-9]\d* +[1-9]\d* `, lid, regexp.QuoteMeta(ln.Addr().String())), text)
	assert.Regexp(t, fmt.Sprintf(`(?m)^%d +ESTAB +5 +0 +%s +%s +soft +soft-\w+ +%d\n\t rtt:\S+ retrans:\d+ age:\S+ lastsnd:`,
		accepted.ID, regexp.QuoteMeta(conns[1].LocalAddr().String()), regexp.QuoteMeta(conns[1].RemoteAddr().String()), lid), text)
	assert.Regexp(t, fmt.Sprintf(`(?m)^%d +ESTAB +0 +\d+ +%s +%s +soft +soft-\w+ +-$`,
		dialed.ID, regexp.QuoteMeta(conns[0].LocalAddr().String()), regexp.QuoteMeta(conns[0].RemoteAddr().String())), text)

	one := get(t, srv, fmt.Sprintf("?id=%d", accepted.ID), "")
	assert.Regexp(t, `^ID +State`, one)
	assert.Contains(t, one, "\n"+fmt.Sprint(accepted.ID)+" ")
	assert.NotContains(t, one, "\n"+fmt.Sprint(dialed.ID)+" ", "only the conn asked for")
	require.True(t, strings.HasSuffix(one, "\n"))
	var c jsonConn
	require.NoError(t, json.Unmarshal([]byte(get(t, srv, fmt.Sprintf("?id=%d&format=json", accepted.ID), "")), &c))
	assert.Equal(t, accepted.ID, c.ID)
	assert.Equal(t, conns[1].LocalAddr().String(), c.LocalAddr)

	code, msg := status(t, srv, srv.URL+"/debug/rdma?id=999999999")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, msg, "no open connection has id 999999999")
	for _, q := range []string{"id=x", "start=-1", "limit=0", "limit=10001", "listener=a"} {
		code, _ := status(t, srv, srv.URL+"/debug/rdma?"+q)
		assert.Equal(t, http.StatusBadRequest, code, q)
	}
}

// Pages of limit connections from a start id cover every connection once,
// each page names the next, and listener= keeps that listener's only.
func TestHandlerPages(t *testing.T) {
	ln, srv := serveDebug(t)
	conns := pairs(t, ln, 12)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	lid := listenerID(t, get(t, srv, "?format=json", ""), ln.Addr().String())
	want := map[string]bool{}
	for _, c := range conns {
		want[c.LocalAddr().String()+" "+c.RemoteAddr().String()] = true
	}
	for _, tc := range []struct {
		query string
		want  int // of ours
	}{{"", 24}, {fmt.Sprintf("&listener=%d", lid), 12}} {
		seen := map[string]bool{}
		var start uint64
		pages := 0
		for {
			var page jsonPage
			body := get(t, srv, fmt.Sprintf("?format=json&limit=5&start=%d%s", start, tc.query), "")
			require.NoError(t, json.Unmarshal([]byte(body), &page))
			require.LessOrEqual(t, len(page.Conns), 5)
			pages++
			text := get(t, srv, fmt.Sprintf("?limit=5&start=%d%s", start, tc.query), "")
			for _, c := range page.Conns {
				k := c.LocalAddr + " " + c.RemoteAddr
				require.False(t, seen[k], "on one page only: %s", k)
				seen[k] = true
				assert.GreaterOrEqual(t, c.ID, start)
				if tc.query != "" {
					assert.Equal(t, lid, c.ListenerID)
				}
			}
			if page.Next == 0 {
				assert.NotContains(t, text, "next: ")
				break
			}
			assert.Contains(t, text, fmt.Sprintf("next: ?start=%d&limit=5%s\n", page.Next, tc.query))
			start = page.Next
		}
		n := 0
		for k := range seen {
			if want[k] {
				n++
			}
		}
		assert.Equal(t, tc.want, n, "query %q", tc.query)
		assert.GreaterOrEqual(t, pages, tc.want/5)
	}
}

// The text, pinned for a snapshot of fixed values.
func TestWriteTextGolden(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	snap := Snapshot{
		Now: now,
		Process: rdma.ProcessStats{Open: 2, Totals: rdma.ConnTotals{Opened: 3, Closed: 1, BytesSent: 10, MessagesSent: 2, BytesReceived: 5, MessagesReceived: 1},
			Soft: soft.Counters{ShmOffersAccepted: 1}},
		Listeners: []rdma.ListenerStats{{ID: 1, Addr: "127.0.0.1:7471", Provider: "soft", Wire: "stream", Opened: now.Add(-90 * time.Second), Accepted: 2, Open: 1, Capacity: 128}},
		Conns: []rdma.ConnStats{
			{ID: 2, ListenerID: 1, LocalAddr: "127.0.0.1:7471", RemoteAddr: "127.0.0.1:40000", Provider: "soft", Path: "soft-tcp", Wire: "stream",
				Opened: now.Add(-1500 * time.Millisecond), RTT: 1500 * time.Microsecond, Retransmits: 3, Buffered: 5, SinceSent: -1, SinceRecv: 250 * time.Millisecond,
				BytesReceived: 5, MessagesReceived: 1, Reads: 1, RingSize: 65536, PeerRingSize: 65536, SendBufferSize: 65536},
			{ID: 4, LocalAddr: "127.0.0.1:40002", RemoteAddr: "127.0.0.1:9000", Provider: "soft", Path: "soft-shm", Wire: "stream",
				Opened: now.Add(-time.Second), SendBuffered: 10, SinceSent: 2 * time.Millisecond, SinceRecv: -1, Err: "peer vanished"},
		},
		Limit: 2, Next: 5,
	}
	var b strings.Builder
	WriteText(&b, snap)
	const want = `rdma: 2 open, 3 opened, 1 closed, 0 failed, 0 fallbacks; sent 10 B in 2 msgs, received 5 B in 1 msgs
rdma: one-sided: remote_writes:0 remote_bytes_written:0 remote_reads:0 remote_bytes_read:0 notifies_sent:0 notifies_received:0 exposures:0
rdma: rendezvous: sent:0 windowed:0 received:0
soft: rnr_naks_sent:0 rnr_naks_received:0 retransmits:0 ack_timeouts:0 retry_exceeded:0 rnr_retry_exceeded:0 admission_parked:0 admission_slot_waits:0 admission_evicted:0 admission_dropped:0 shm_offers_accepted:1 shm_offers_refused:0 shm_dials_accepted:0 shm_dials_refused:0

listeners: 1
ID     State  Recv-Q Send-Q Local Address:Port    Provider Wire    Accepted   Open Age
1      LISTEN      0    128 127.0.0.1:7471        soft     stream         2      1 1m30s

connections: 2 open; this page: 2 from id 0
ID     State  Recv-Q Send-Q Local Address:Port    Peer Address:Port     Provider Path     Listener
2      ESTAB       5      0 127.0.0.1:7471        127.0.0.1:40000       soft     soft-tcp 1
	 rtt:1.5ms retrans:3 age:1.5s lastsnd:never lastrcv:250ms bytes_sent:0 bytes_received:5 msgs_sent:0 msgs_received:1 writes:0 reads:1
	 ring:65536 peer_ring:65536 sndbuf:65536 send_depth:0 recv_depth:0 sends_pending:0 recvs_posted:0 credits:0
	 ring_growths:0 sndbuf_growths:0 queue_trims:0 credit_waits:0 ring_waits:0 sndbuf_waits:0 write_wait:0s
	 reads_at_once:0 reads_handed:0 reads_spun:0 reads_slept:0 spins:0 spins_caught:0 spins_refused:0 sleeps:0
	 keepalives:0 pings_sent:0 pongs_recv:0 pings_recv:0 pongs_sent:0
4      FAILED      0     10 127.0.0.1:40002       127.0.0.1:9000        soft     soft-shm -
	 rtt:- retrans:0 age:1s lastsnd:2ms lastrcv:never bytes_sent:0 bytes_received:0 msgs_sent:0 msgs_received:0 writes:0 reads:0
	 ring:0 peer_ring:0 sndbuf:0 send_depth:0 recv_depth:0 sends_pending:0 recvs_posted:0 credits:0
	 ring_growths:0 sndbuf_growths:0 queue_trims:0 credit_waits:0 ring_waits:0 sndbuf_waits:0 write_wait:0s
	 reads_at_once:0 reads_handed:0 reads_spun:0 reads_slept:0 spins:0 spins_caught:0 spins_refused:0 sleeps:0
	 keepalives:0 pings_sent:0 pongs_recv:0 pings_recv:0 pongs_sent:0
	 error: peer vanished
next: ?start=5&limit=2
`
	assert.Equal(t, want, b.String())

	// The same snapshot's JSON: snake_case, durations with their unit,
	// empty fields left out (no "devices": null), in the structs' order.
	js := string(marshal(snap))
	const wantJSON = `{
  "now": "2026-11-29T12:00:00Z",
  "process": {
    "open": 2,
    "totals": {
      "opened": 3,
      "closed": 1,
      "bytes_sent": 10,
      "bytes_received": 5,
      "messages_sent": 2,
      "messages_received": 1
    },
    "soft": {
      "shm_offers_accepted": 1
    }
  },
  "listeners": [
    {
      "id": 1,
      "addr": "127.0.0.1:7471",
      "provider": "soft",
      "wire": "stream",
      "opened": "2026-11-29T11:58:30Z",
      "accepted": 2,
      "open": 1,
      "capacity": 128
    }
  ],
  "conns": [
    {
      "bytes_received": 5,
      "messages_received": 1,
      "reads": 1,
      "provider": "soft",
      "path": "soft-tcp",
      "wire": "stream",
      "local_addr": "127.0.0.1:7471",
      "remote_addr": "127.0.0.1:40000",
      "opened": "2026-11-29T11:59:58.5Z",
      "id": 2,
      "listener_id": 1,
      "rtt": "1.5ms",
      "retransmits": 3,
      "ring_size": 65536,
      "peer_ring_size": 65536,
      "send_buffer_size": 65536,
      "buffered": 5,
      "since_recv": "250ms"
    },
    {
      "provider": "soft",
      "path": "soft-shm",
      "wire": "stream",
      "err": "peer vanished",
      "local_addr": "127.0.0.1:40002",
      "remote_addr": "127.0.0.1:9000",
      "opened": "2026-11-29T11:59:59Z",
      "id": 4,
      "send_buffered": 10,
      "since_sent": "2ms"
    }
  ],
  "limit": 2,
  "next": 5
}
`
	assert.Equal(t, wantJSON, js)
}

// The live page's shape, its variable fields (addresses, numbers,
// durations) normalised: pinned as a whole, from the listeners on.
func TestHandlerTextShape(t *testing.T) {
	ln, srv := serveDebug(t)
	conns := pairs(t, ln, 1)
	defer conns[0].Close()
	defer conns[1].Close()
	lid := listenerID(t, get(t, srv, "?format=json", ""), ln.Addr().String())
	text := get(t, srv, fmt.Sprintf("?listener=%d", lid), "")
	text = text[strings.Index(text, "\nlisteners: "):]
	// Other tests' listeners may still be open: keep ours.
	var lines []string
	for _, l := range strings.SplitAfter(text, "\n") {
		if strings.Contains(l, "LISTEN") && !strings.Contains(l, ln.Addr().String()) {
			continue
		}
		lines = append(lines, l)
	}
	text = strings.Join(lines, "")
	for _, r := range []struct{ re, to string }{
		{`127\.0\.0\.1:\d+ *`, "ADDR "},
		{`soft-(tcp|shm) `, "soft-PATH "},
		{`\b\d+(\.\d+)?(ns|µs|ms|s|m|h)\b|\b(\d+(h|m))+\d+(\.\d+)?s\b`, "D"},
		{`\b\d+\b`, "N"},
		{` +`, " "},
	} {
		text = regexp.MustCompile(r.re).ReplaceAllString(text, r.to)
	}
	const want = `
listeners: N
ID State Recv-Q Send-Q Local Address:Port Provider Wire Accepted Open Age
N LISTEN N N ADDR soft stream N N D

connections: N open; this page: N from id N of listener N
ID State Recv-Q Send-Q Local Address:Port Peer Address:Port Provider Path Listener
N ESTAB N N ADDR ADDR soft soft-PATH N
	 rtt:D retrans:N age:D lastsnd:never lastrcv:never bytes_sent:N bytes_received:N msgs_sent:N msgs_received:N writes:N reads:N
	 ring:N peer_ring:N sndbuf:N send_depth:N recv_depth:N sends_pending:N recvs_posted:N credits:N
	 ring_growths:N sndbuf_growths:N queue_trims:N credit_waits:N ring_waits:N sndbuf_waits:N write_wait:D
	 reads_at_once:N reads_handed:N reads_spun:N reads_slept:N spins:N spins_caught:N spins_refused:N sleeps:N
	 keepalives:N pings_sent:N pongs_recv:N pings_recv:N pongs_sent:N
`
	assert.Equal(t, want, text)
}
