// Package promrdma exports the rdma package's process statistics as
// Prometheus metrics: totals over every connection the process has had
// (counters named rdma_..._total in base units: bytes, seconds), the
// connections open now, and each RDMA device port's counters and
// hw_counters. No metric has a per-connection label: a fleet's
// connections come and go, and each would be a series of its own; the
// rdmadebug handler lists connections one by one.
//
//	prometheus.MustRegister(promrdma.NewCollector())
//
// It is a module of its own, so that the rdma module does not depend on
// the Prometheus client library.
package promrdma

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rdmanet/rdma"
)

// Collector is a prometheus.Collector of the rdma package's statistics.
// Each scrape reads them once (rdma.ReadProcessStats: the registry of
// open connections, and the devices' counters from sysfs).
type Collector struct{}

// NewCollector returns a Collector; register it once per registry.
func NewCollector() *Collector { return &Collector{} }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("rdma_"+name, help, labels, nil)
}

var (
	open      = desc("connections_open", "Connections (rdma.Conn and rdma.RsocketConn) open now, by provider (rdmacore, soft) and by path, what carries their bytes now (rdmacore; soft-shm: shared memory; soft-tcp: TCP, where a same-host soft connection starts before it moves to shared memory). sum() is all of them.", "provider", "path")
	opened    = desc("connections_opened_total", "Connections established since the process started.")
	closed    = desc("connections_closed_total", "Connections closed since the process started.")
	failed    = desc("connections_failed_total", "Connections that failed (a transport error, a peer that vanished or broke the protocol).")
	fallbacks = desc("fallbacks_total", "Connections an auto dial carried on soft after the RDMA connection manager attempt failed.")
	bytes     = desc("bytes_total", "Stream bytes: written by Write (direction=sent) or returned by Read (direction=received).", "direction")
	messages  = desc("messages_total", "Data writes on the wire: posted (direction=sent) or arrived (direction=received).", "direction")
	writes    = desc("writes_total", "Write calls that accepted at least a byte.")
	reads     = desc("reads_total", "Read calls that returned data, by how it came: at_once (there already), handed (another caller polled it in), spun (the reader's busy-poll caught it), slept (after a sleep on the completion channel).", "data")
	growths   = desc("buffer_growths_total", "Receive rings (buffer=ring) and send buffers (buffer=send) moved to larger ones.", "buffer")
	waits     = desc("write_waits_total", "Times a Write waited, by what it lacked: credits (message credits or send queue slots), peer_ring (room in the peer's ring), send_buffer.", "reason")
	waitSecs  = desc("write_wait_seconds_total", "Time Writes spent waiting for credits or room.")
	keepalive = desc("keepalives_total", "Keepalive probes sent on idle connections.")
	pings     = desc("heartbeat_pings_total", "Heartbeat pings sent to silent peers.")
	pongs     = desc("heartbeat_pongs_received_total", "Answers received to heartbeat pings.")
	remoteOps = desc("remote_operations_total", "One-sided operations that succeeded: RDMA writes into the peer's exposed ranges (op=write: WriteRemote and WriteRemoteNotify) and reads from them (op=read: ReadRemote).", "op")
	remoteB   = desc("remote_bytes_total", "Bytes one-sided operations wrote into the peer's exposed ranges (op=write) or read from them (op=read).", "op")
	notifies  = desc("notifications_total", "WriteRemoteNotify notifications: sent (direction=sent) or returned by WaitNotify (direction=received).", "direction")
	exposures = desc("exposures_total", "Ranges of Buffers exposed to a peer (Expose calls that succeeded).")
	rndv      = desc("rendezvous_total", "Rendezvous transfers (large Writes from Buffers, read by the peer's RDMA READ where they lie): sent through a memory window (kind=sent_window) or a registration of their own (kind=sent_registration), or read from the peer (kind=received).", "kind")

	softRNR      = desc("soft_rnr_naks_total", "Soft provider: RNR NAKs (a SEND or WRITE WITH IMMEDIATE that found no receive posted), sent by responders (direction=sent) or received by requesters (direction=received).", "direction")
	softRetrans  = desc("soft_retransmits_total", "Soft provider: requests sent again after an RNR NAK.")
	softTimeouts = desc("soft_ack_timeouts_total", "Soft provider: transport timer expiries with sends outstanding and no progress.")
	softRetryExc = desc("soft_retry_exceeded_total", "Soft provider: QPs whose sends failed after their retries, by kind: transport (RETRY_EXC_ERR) or rnr (RNR_RETRY_EXC_ERR).", "kind")
	softAdmit    = desc("soft_admission_total", "Soft provider listeners' handshake admission: connections parked for want of a waiting place (event=parked), connections that waited for a handshake slot (event=slot_wait), silent waiting connections closed for another host's (event=evicted), parked connections closed beyond the bound (event=dropped).", "event")
	softShm      = desc("soft_shm_offers_total", "Soft provider: handshakes this process's listeners answered whose request offered shared memory, by answer: accepted (the connection may use it: it starts on TCP and moves once it talks) or refused (it stays on TCP). Counts handshakes, not connections on shared memory: rdma_connections_open{path=\"soft-shm\"} counts those.", "answer")
	softShmDials = desc("soft_shm_dials_total", "Soft provider: handshakes of this process's dials that offered shared memory, by the listener's answer: accepted (the connection may use it: it starts on TCP and moves once it talks) or refused (it stays on TCP). Counts handshakes, not connections on shared memory: rdma_connections_open{path=\"soft-shm\"} counts those.", "answer")

	devCount = desc("device_port_counter_total", "An RDMA device port's counter from sysfs (ports/N/counters: the InfiniBand port counters, data in 4-byte words as the kernel reports them).", "device", "port", "counter")
	devHW    = desc("device_port_hw_counter_total", "An RDMA device port's driver counter from sysfs (ports/N/hw_counters: rnr_nak_retry_err, local_ack_timeout_err, out_of_sequence, ...).", "device", "port", "counter")
)

// providerOf is the provider a path belongs to.
func providerOf(path string) string {
	if strings.HasPrefix(path, rdma.ProviderSoft) {
		return rdma.ProviderSoft
	}
	return path
}

// Describe sends every metric's description.
func (*Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{open, opened, closed, failed, fallbacks, bytes, messages, writes, reads,
		growths, waits, waitSecs, keepalive, pings, pongs, remoteOps, remoteB, notifies, exposures, rndv,
		softRNR, softRetrans, softTimeouts, softRetryExc, softAdmit, softShm, softShmDials, devCount, devHW} {
		ch <- d
	}
}

// Collect reads the statistics once and sends them.
func (*Collector) Collect(ch chan<- prometheus.Metric) {
	ps := rdma.ReadProcessStats()
	t := ps.Totals
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	// Every path has its series, 0 when none is open on it, so that a
	// dashboard's sum() or rate() never lacks one.
	for _, p := range [][2]string{{rdma.ProviderRDMACore, "rdmacore"}, {rdma.ProviderSoft, "soft-shm"}, {rdma.ProviderSoft, "soft-tcp"}} {
		gauge(open, float64(ps.OpenByPath[p[1]]), p[0], p[1])
	}
	for path, n := range ps.OpenByPath {
		switch path {
		case "rdmacore", "soft-shm", "soft-tcp":
		case "": // connections closing: nothing carries them any more
		default: // a path added since
			gauge(open, float64(n), providerOf(path), path)
		}
	}
	counter(opened, t.Opened)
	counter(closed, t.Closed)
	counter(failed, t.Failed)
	counter(fallbacks, t.Fallbacks)
	counter(bytes, t.BytesSent, "sent")
	counter(bytes, t.BytesReceived, "received")
	counter(messages, t.MessagesSent, "sent")
	counter(messages, t.MessagesReceived, "received")
	counter(writes, t.Writes)
	counter(reads, t.ReadsAtOnce, "at_once")
	counter(reads, t.ReadsHanded, "handed")
	counter(reads, t.ReadsSpun, "spun")
	counter(reads, t.ReadsSlept, "slept")
	counter(growths, t.RingGrowths, "ring")
	counter(growths, t.SendBufferGrowths, "send")
	counter(waits, t.CreditWaits, "credits")
	counter(waits, t.RingWaits, "peer_ring")
	counter(waits, t.SendBufferWaits, "send_buffer")
	ch <- prometheus.MustNewConstMetric(waitSecs, prometheus.CounterValue, t.WriteWaitTime.Seconds())
	counter(keepalive, t.KeepAlives)
	counter(pings, t.PingsSent)
	counter(pongs, t.PongsRecv)
	counter(remoteOps, t.RemoteWrites, "write")
	counter(remoteOps, t.RemoteReads, "read")
	counter(remoteB, t.RemoteBytesWritten, "write")
	counter(remoteB, t.RemoteBytesRead, "read")
	counter(notifies, t.NotifiesSent, "sent")
	counter(notifies, t.NotifiesReceived, "received")
	counter(exposures, t.Exposures)
	counter(rndv, t.RendezvousWindowed, "sent_window")
	counter(rndv, t.RendezvousSent-t.RendezvousWindowed, "sent_registration")
	counter(rndv, t.RendezvousReceived, "received")
	s := ps.Soft
	counter(softRNR, s.RNRNaksSent, "sent")
	counter(softRNR, s.RNRNaksReceived, "received")
	counter(softRetrans, s.Retransmits)
	counter(softTimeouts, s.AckTimeouts)
	counter(softRetryExc, s.RetryExceeded, "transport")
	counter(softRetryExc, s.RNRRetryExceeded, "rnr")
	counter(softAdmit, s.AdmissionParked, "parked")
	counter(softAdmit, s.AdmissionSlotWaits, "slot_wait")
	counter(softAdmit, s.AdmissionEvicted, "evicted")
	counter(softAdmit, s.AdmissionDropped, "dropped")
	counter(softShm, s.ShmOffersAccepted, "accepted")
	counter(softShm, s.ShmOffersRefused, "refused")
	counter(softShmDials, s.ShmDialsAccepted, "accepted")
	counter(softShmDials, s.ShmDialsRefused, "refused")
	for _, d := range ps.Devices {
		port := strconv.Itoa(d.Port)
		for k, v := range d.Counters {
			counter(devCount, v, d.Device, port, k)
		}
		for k, v := range d.HWCounters {
			counter(devHW, v, d.Device, port, k)
		}
	}
}
