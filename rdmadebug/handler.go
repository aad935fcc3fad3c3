// Package rdmadebug publishes the rdma package's statistics to people:
// an http.Handler that lists every open connection with its counters, as
// text in the manner of `ss -i` or as JSON, and an expvar variable "rdma"
// holding the process's totals. Mount the handler as net/http/pprof's:
//
//	import "github.com/rdmanet/rdma/rdmadebug"
//
//	http.Handle("/debug/rdma", rdmadebug.Handler())
//	go http.ListenAndServe("localhost:6060", nil)
//
// then `curl localhost:6060/debug/rdma` (text), `/debug/rdma?format=json`
// or with `Accept: application/json` (JSON), and `/debug/vars` for expvar.
//
// It is a package of its own so that programs that do not want it do not
// link net/http and expvar (capi's librdma.so among them). What each
// counter means is the rdma package's ConnStats and ConnTotals.
package rdmadebug

import (
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/rdmanet/rdma"
)

func init() {
	// The process's totals (over every connection, closed and open), how
	// many are open, and the devices' counters, at each read of /debug/vars.
	expvar.Publish("rdma", expvar.Func(func() any { return rdma.ReadProcessStats() }))
}

// Snapshot is what the handler serves as JSON.
type Snapshot struct {
	Process rdma.ProcessStats
	Conns   []rdma.ConnStats // every open connection, oldest first
}

// Handler serves the statistics of the process and of every open
// connection: text by default, JSON with ?format=json or an Accept header
// that asks for application/json.
func Handler() http.Handler { return http.HandlerFunc(serve) }

func serve(w http.ResponseWriter, r *http.Request) {
	snap := Snapshot{Process: rdma.ReadProcessStats(), Conns: rdma.OpenConnStats()}
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snap)
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

// WriteText writes snap as the handler's text: a line of totals, then per
// connection a line of who and what carries it and an indented line of
// its counters, as `ss -i` does.
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
	for _, c := range snap.Conns {
		state := "ESTAB"
		if c.Err != "" {
			state = "FAILED"
		}
		fmt.Fprintf(w, "%-6s %-21s %-21s %s %s/%s age:%s\n", state, c.LocalAddr, c.RemoteAddr, c.Provider, c.Path, c.Wire,
			time.Since(c.Opened).Round(time.Millisecond))
		fmt.Fprintf(w, "\tbytes_sent:%d bytes_received:%d msgs_sent:%d msgs_received:%d writes:%d reads:%d\n",
			c.BytesSent, c.BytesReceived, c.MessagesSent, c.MessagesReceived, c.Writes, c.Reads)
		fmt.Fprintf(w, "\tring:%d peer_ring:%d sndbuf:%d send_depth:%d recv_depth:%d sends_pending:%d recvs_posted:%d credits:%d buffered:%d snd_buffered:%d\n",
			c.RingSize, c.PeerRingSize, c.SendBufferSize, c.SendDepth, c.RecvDepth, c.SendsPending, c.RecvsPosted, c.Credits, c.Buffered, c.SendBuffered)
		fmt.Fprintf(w, "\tring_growths:%d sndbuf_growths:%d queue_trims:%d credit_waits:%d ring_waits:%d sndbuf_waits:%d write_wait:%s\n",
			c.RingGrowths, c.SendBufferGrowths, c.QueueTrims, c.CreditWaits, c.RingWaits, c.SendBufferWaits, c.WriteWaitTime)
		fmt.Fprintf(w, "\treads_at_once:%d reads_handed:%d reads_spun:%d reads_slept:%d spins:%d spins_caught:%d sleeps:%d\n",
			c.ReadsAtOnce, c.ReadsHanded, c.ReadsSpun, c.ReadsSlept, c.Spins, c.SpinsCaught, c.Sleeps)
		fmt.Fprintf(w, "\tkeepalives:%d pings_sent:%d pongs_recv:%d pings_recv:%d pongs_sent:%d lastsnd:%s lastrcv:%s\n",
			c.KeepAlives, c.PingsSent, c.PongsRecv, c.PingsRecv, c.PongsSent, ago(c.SinceSent), ago(c.SinceRecv))
		if c.RemoteWrites|c.RemoteReads|c.NotifiesReceived|c.Exposures != 0 {
			fmt.Fprintf(w, "\tremote_writes:%d remote_bytes_written:%d remote_reads:%d remote_bytes_read:%d notifies_sent:%d notifies_received:%d exposures:%d exposed:%d\n",
				c.RemoteWrites, c.RemoteBytesWritten, c.RemoteReads, c.RemoteBytesRead, c.NotifiesSent, c.NotifiesReceived, c.Exposures, c.Exposed)
		}
		if c.RendezvousSent|c.RendezvousReceived != 0 {
			fmt.Fprintf(w, "\trendezvous_sent:%d rendezvous_windowed:%d rendezvous_received:%d\n",
				c.RendezvousSent, c.RendezvousWindowed, c.RendezvousReceived)
		}
		if c.Fallback != "" {
			fmt.Fprintf(w, "\tfallback: %s\n", c.Fallback)
		}
		if c.Err != "" {
			fmt.Fprintf(w, "\terror: %s\n", c.Err)
		}
	}
	devs := snap.Process.Devices
	for _, d := range devs {
		fmt.Fprintf(w, "device %s port %d\n", d.Device, d.Port)
		writeCounters(w, "counters", d.Counters)
		writeCounters(w, "hw_counters", d.HWCounters)
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
	fmt.Fprintf(w, "\t%s:", what)
	for _, k := range names {
		fmt.Fprintf(w, " %s:%d", k, m[k])
	}
	fmt.Fprintln(w)
}

func ago(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(time.Millisecond).String()
}
