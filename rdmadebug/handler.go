// Package rdmadebug publishes the rdma package's statistics to people:
// an http.Handler in the manner of `ss -i` and gRPC's channelz, as text
// or JSON, and an expvar variable "rdma" holding the process's totals.
// Mount the handler as net/http/pprof's:
//
//	import "github.com/rdmanet/rdma/rdmadebug"
//
//	http.Handle("/debug/rdma", rdmadebug.Handler())
//	go http.ListenAndServe("localhost:6060", nil)
//
// then:
//
//	curl localhost:6060/debug/rdma                      # totals, listeners, the first 100 conns
//	curl 'localhost:6060/debug/rdma?start=2000&limit=500' # conns with id 2000 and above, 500 of them
//	curl 'localhost:6060/debug/rdma?listener=3'           # listener 3's conns
//	curl 'localhost:6060/debug/rdma?id=2042'              # one conn (404 if it is not open)
//	curl 'localhost:6060/debug/rdma?format=json'          # JSON (or Accept: application/json)
//
// Every connection and listener has an id, unique in the process and
// kept while it is open (rdma.ConnStats.ID, rdma.ListenerStats.ID). The
// text has a header row and a row per listener (Recv-Q: connections
// waiting for Accept, Send-Q: how many may wait, as ss shows listening
// sockets) and per connection (Recv-Q: bytes arrived and not read,
// Send-Q: bytes written and not yet completed), each connection followed
// by an indented line of its counters: rtt and retrans (soft on TCP:
// the kernel's, as ss -i shows them), the last message each way, and
// what rdma.ConnStats documents. A page that stops short ends with the
// query of the next. JSON names fields in snake_case, writes durations
// with their unit ("1.5ms") and leaves empty fields out.
//
// It is a package of its own so that programs that do not want it do not
// link net/http and expvar (capi's librdma.so among them).
package rdmadebug

import (
	"expvar"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rdmanet/rdma"
)

func init() {
	// The process's totals (over every connection, closed and open), how
	// many are open, and the devices' counters, at each read of /debug/vars,
	// in the handler's JSON form.
	expvar.Publish("rdma", expvar.Func(func() any { return jsonValue(rdma.ReadProcessStats()) }))
}

// DefaultLimit is how many connections a page lists unless the query
// says (limit=); MaxLimit the most it may ask for.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

// Snapshot is what the handler serves: the process's totals, the open
// listeners and a page of the open connections.
type Snapshot struct {
	Now       time.Time // when it was taken (connections' ages count to it)
	Process   rdma.ProcessStats
	Listeners []rdma.ListenerStats
	Conns     []rdma.ConnStats // the page, in id order
	Start     uint64           // the page's query: start=, limit=, listener=
	Limit     int
	Listener  uint64
	Next      uint64 // the next page's start; 0: this is the last
}

// Handler serves the statistics of the process, its listeners and its
// connections: text by default, JSON with ?format=json or an Accept header
// that asks for application/json. See the package doc for the queries.
func Handler() http.Handler { return http.HandlerFunc(serve) }

func serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	js := wantsJSON(r)
	if s := q.Get("id"); s != "" {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, "rdmadebug: id: not a connection id: "+strconv.Quote(s), http.StatusBadRequest)
			return
		}
		c, ok := rdma.ConnStatsByID(id)
		if !ok {
			http.Error(w, fmt.Sprintf("rdmadebug: no open connection has id %d", id), http.StatusNotFound)
			return
		}
		if js {
			writeJSON(w, c)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeConnHeader(w)
		writeConn(w, time.Now(), c)
		return
	}
	snap := Snapshot{Now: time.Now(), Limit: DefaultLimit}
	for _, p := range []struct {
		name string
		to   *uint64
	}{{"start", &snap.Start}, {"listener", &snap.Listener}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				http.Error(w, "rdmadebug: "+p.name+": not an id: "+strconv.Quote(s), http.StatusBadRequest)
				return
			}
			*p.to = n
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			http.Error(w, fmt.Sprintf("rdmadebug: limit: %q is not in 1..%d", s, MaxLimit), http.StatusBadRequest)
			return
		}
		snap.Limit = n
	}
	snap.Process = rdma.ReadProcessStats()
	snap.Listeners = rdma.OpenListenerStats()
	snap.Conns, snap.Next = rdma.ConnStatsPage(snap.Start, snap.Limit, snap.Listener)
	if js {
		writeJSON(w, snap)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	WriteText(w, snap)
}

func wantsJSON(r *http.Request) bool {
	switch r.URL.Query().Get("format") {
	case "json":
		return true
	case "text":
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(marshal(v))
}

// WriteText writes snap as the handler's text: the process's totals, a
// table of listeners and one of connections, each with a header row, and
// the next page's query if there is one. Every line ends in a newline.
func WriteText(w io.Writer, snap Snapshot) {
	t := snap.Process.Totals
	fmt.Fprintf(w, "rdma: %d open, %d opened, %d closed, %d failed, %d fallbacks; sent %d B in %d msgs, received %d B in %d msgs\n",
		snap.Process.Open, t.Opened, t.Closed, t.Failed, t.Fallbacks, t.BytesSent, t.MessagesSent, t.BytesReceived, t.MessagesReceived)
	fmt.Fprintf(w, "rdma: one-sided: remote_writes:%d remote_bytes_written:%d remote_reads:%d remote_bytes_read:%d notifies_sent:%d notifies_received:%d exposures:%d\n",
		t.RemoteWrites, t.RemoteBytesWritten, t.RemoteReads, t.RemoteBytesRead, t.NotifiesSent, t.NotifiesReceived, t.Exposures)
	fmt.Fprintf(w, "rdma: rendezvous: sent:%d windowed:%d received:%d\n", t.RendezvousSent, t.RendezvousWindowed, t.RendezvousReceived)
	s := snap.Process.Soft
	fmt.Fprintf(w, "soft: rnr_naks_sent:%d rnr_naks_received:%d retransmits:%d ack_timeouts:%d retry_exceeded:%d rnr_retry_exceeded:%d "+
		"admission_parked:%d admission_slot_waits:%d admission_evicted:%d admission_dropped:%d shm_offers_accepted:%d shm_offers_refused:%d shm_dials_accepted:%d shm_dials_refused:%d\n",
		s.RNRNaksSent, s.RNRNaksReceived, s.Retransmits, s.AckTimeouts, s.RetryExceeded, s.RNRRetryExceeded,
		s.AdmissionParked, s.AdmissionSlotWaits, s.AdmissionEvicted, s.AdmissionDropped, s.ShmOffersAccepted, s.ShmOffersRefused,
		s.ShmDialsAccepted, s.ShmDialsRefused)
	for _, d := range snap.Process.Devices {
		fmt.Fprintf(w, "device %s port %d\n", d.Device, d.Port)
		writeCounters(w, "counters", d.Counters)
		writeCounters(w, "hw_counters", d.HWCounters)
	}

	fmt.Fprintf(w, "\nlisteners: %d\n", len(snap.Listeners))
	fmt.Fprintf(w, "%-6s %-6s %6s %6s %-21s %-8s %-7s %8s %6s %s\n",
		"ID", "State", "Recv-Q", "Send-Q", "Local Address:Port", "Provider", "Wire", "Accepted", "Open", "Age")
	for _, l := range snap.Listeners {
		fmt.Fprintf(w, "%-6d %-6s %6d %6d %-21s %-8s %-7s %8d %6d %s\n",
			l.ID, "LISTEN", l.Backlog, l.Capacity, l.Addr, l.Provider, l.Wire, l.Accepted, l.Open, dur(snap.Now.Sub(l.Opened)))
	}

	fmt.Fprintf(w, "\nconnections: %d open; this page: %d from id %d", snap.Process.Open, len(snap.Conns), snap.Start)
	if snap.Listener != 0 {
		fmt.Fprintf(w, " of listener %d", snap.Listener)
	}
	fmt.Fprintln(w)
	writeConnHeader(w)
	for _, c := range snap.Conns {
		writeConn(w, snap.Now, c)
	}
	if snap.Next != 0 {
		fmt.Fprintf(w, "next: ?start=%d&limit=%d", snap.Next, snap.Limit)
		if snap.Listener != 0 {
			fmt.Fprintf(w, "&listener=%d", snap.Listener)
		}
		fmt.Fprintln(w)
	}
}

func writeConnHeader(w io.Writer) {
	fmt.Fprintf(w, "%-6s %-6s %6s %6s %-21s %-21s %-8s %-8s %s\n",
		"ID", "State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port", "Provider", "Path", "Listener")
}

// writeConn writes a connection's row and its indented counters.
func writeConn(w io.Writer, now time.Time, c rdma.ConnStats) {
	state := "ESTAB"
	if c.Err != "" {
		state = "FAILED"
	}
	listener := "-"
	if c.ListenerID != 0 {
		listener = strconv.FormatUint(c.ListenerID, 10)
	}
	path := c.Path
	if c.Wire != "stream" && c.Wire != "" {
		path += "/" + c.Wire
	}
	fmt.Fprintf(w, "%-6d %-6s %6d %6d %-21s %-21s %-8s %-8s %s\n",
		c.ID, state, c.Buffered, c.SendBuffered, c.LocalAddr, c.RemoteAddr, c.Provider, path, listener)
	fmt.Fprintf(w, "\t rtt:%s retrans:%d age:%s lastsnd:%s lastrcv:%s bytes_sent:%d bytes_received:%d msgs_sent:%d msgs_received:%d writes:%d reads:%d\n",
		orDash(c.RTT), c.Retransmits, dur(now.Sub(c.Opened)), ago(c.SinceSent), ago(c.SinceRecv),
		c.BytesSent, c.BytesReceived, c.MessagesSent, c.MessagesReceived, c.Writes, c.Reads)
	fmt.Fprintf(w, "\t ring:%d peer_ring:%d sndbuf:%d send_depth:%d recv_depth:%d sends_pending:%d recvs_posted:%d credits:%d\n",
		c.RingSize, c.PeerRingSize, c.SendBufferSize, c.SendDepth, c.RecvDepth, c.SendsPending, c.RecvsPosted, c.Credits)
	fmt.Fprintf(w, "\t ring_growths:%d sndbuf_growths:%d queue_trims:%d credit_waits:%d ring_waits:%d sndbuf_waits:%d write_wait:%s\n",
		c.RingGrowths, c.SendBufferGrowths, c.QueueTrims, c.CreditWaits, c.RingWaits, c.SendBufferWaits, dur(c.WriteWaitTime))
	fmt.Fprintf(w, "\t reads_at_once:%d reads_handed:%d reads_spun:%d reads_slept:%d spins:%d spins_caught:%d spins_refused:%d sleeps:%d\n",
		c.ReadsAtOnce, c.ReadsHanded, c.ReadsSpun, c.ReadsSlept, c.Spins, c.SpinsCaught, c.SpinsRefused, c.Sleeps)
	fmt.Fprintf(w, "\t keepalives:%d pings_sent:%d pongs_recv:%d pings_recv:%d pongs_sent:%d\n",
		c.KeepAlives, c.PingsSent, c.PongsRecv, c.PingsRecv, c.PongsSent)
	if c.RemoteWrites|c.RemoteReads|c.NotifiesReceived|c.Exposures != 0 {
		fmt.Fprintf(w, "\t remote_writes:%d remote_bytes_written:%d remote_reads:%d remote_bytes_read:%d notifies_sent:%d notifies_received:%d exposures:%d exposed:%d\n",
			c.RemoteWrites, c.RemoteBytesWritten, c.RemoteReads, c.RemoteBytesRead, c.NotifiesSent, c.NotifiesReceived, c.Exposures, c.Exposed)
	}
	if c.RendezvousSent|c.RendezvousReceived != 0 {
		fmt.Fprintf(w, "\t rendezvous_sent:%d rendezvous_windowed:%d rendezvous_received:%d\n",
			c.RendezvousSent, c.RendezvousWindowed, c.RendezvousReceived)
	}
	if c.Fallback != "" {
		fmt.Fprintf(w, "\t fallback: %s\n", c.Fallback)
	}
	if c.Err != "" {
		fmt.Fprintf(w, "\t error: %s\n", c.Err)
	}
}

func writeCounters(w io.Writer, what string, m map[string]uint64) {
	if len(m) == 0 {
		return
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\t %s:", what)
	for _, k := range names {
		fmt.Fprintf(w, " %s:%d", k, m[k])
	}
	fmt.Fprintln(w)
}

// dur is d to the microsecond, with its unit ("1.5ms").
func dur(d time.Duration) string { return max(d, 0).Round(time.Microsecond).String() }

// ago is a time since the last message, or "never".
func ago(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return dur(d)
}

// orDash is d, or "-" where the transport does not say.
func orDash(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return dur(d)
}
