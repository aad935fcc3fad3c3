package promrdma

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rdmanet/rdma"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The metrics pass the client library's lint and count what a pair of
// connections did: 3 Writes of 1000 bytes one way, one of 3000 back.
func TestCollector(t *testing.T) {
	// The process's counters before: what earlier tests (and earlier runs
	// of this one, go test -count=N) counted stays in them.
	base := rdma.ReadProcessStats()
	bt, bs := base.Totals, base.Soft
	cfg := &rdma.Config{Provider: rdma.ProviderSoft}
	ln, err := (&rdma.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		s, _ := ln.Accept()
		acc <- s
	}()
	c, err := (&rdma.Dialer{Config: cfg, Timeout: 10 * time.Second}).Dial("rdma", ln.Addr().String())
	require.NoError(t, err)
	s := <-acc
	require.NotNil(t, s)
	buf := make([]byte, 3000)
	for range 3 {
		_, err := c.Write(buf[:1000])
		require.NoError(t, err)
	}
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
	_, err = s.Write(buf)
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)

	// One-sided: two writes of 100 bytes and a read of 50 into one exposure.
	target, err := rdma.AllocBuffer(4096)
	require.NoError(t, err)
	defer target.Free()
	local, err := rdma.AllocBuffer(4096)
	require.NoError(t, err)
	defer local.Free()
	d, err := s.(*rdma.Conn).Expose(target, 0, 4096, rdma.AccessRead|rdma.AccessWrite)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, c.(*rdma.Conn).WriteRemote(d, 0, local.Bytes()[:100]))
	}
	require.NoError(t, c.(*rdma.Conn).ReadRemote(d, 0, local.Bytes()[:50]))

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(NewCollector()))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems, "lint")
	problems, err = testutil.CollectAndLint(NewCollector())
	require.NoError(t, err)
	assert.Empty(t, problems, "lint")

	want := fmt.Sprintf(`
# HELP rdma_bytes_total Stream bytes: written by Write (direction=sent) or returned by Read (direction=received).
# TYPE rdma_bytes_total counter
rdma_bytes_total{direction="received"} %d
rdma_bytes_total{direction="sent"} %d
# HELP rdma_messages_total Data writes on the wire: posted (direction=sent) or arrived (direction=received).
# TYPE rdma_messages_total counter
rdma_messages_total{direction="received"} %d
rdma_messages_total{direction="sent"} %d
# HELP rdma_writes_total Write calls that accepted at least a byte.
# TYPE rdma_writes_total counter
rdma_writes_total %d
`, bt.BytesReceived+6000, bt.BytesSent+6000, bt.MessagesReceived+4, bt.MessagesSent+4, bt.Writes+4)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rdma_bytes_total", "rdma_messages_total", "rdma_writes_total"))
	// Both ends are open, each on one of soft's paths (a same-host
	// connection starts on TCP and moves to shared memory once it talks);
	// every path has its series.
	open := openByPath(t, reg)
	assert.Equal(t, float64(base.Open+2), open["soft/soft-tcp"]+open["soft/soft-shm"], "%v", open)
	assert.Equal(t, 0.0, open["rdmacore/rdmacore"], "%v", open)
	assert.Len(t, open, 3, "%v", open)
	want = fmt.Sprintf(`
# HELP rdma_exposures_total Ranges of Buffers exposed to a peer (Expose calls that succeeded).
# TYPE rdma_exposures_total counter
rdma_exposures_total %d
# HELP rdma_remote_bytes_total Bytes one-sided operations wrote into the peer's exposed ranges (op=write) or read from them (op=read).
# TYPE rdma_remote_bytes_total counter
rdma_remote_bytes_total{op="read"} %d
rdma_remote_bytes_total{op="write"} %d
# HELP rdma_remote_operations_total One-sided operations that succeeded: RDMA writes into the peer's exposed ranges (op=write: WriteRemote and WriteRemoteNotify) and reads from them (op=read: ReadRemote).
# TYPE rdma_remote_operations_total counter
rdma_remote_operations_total{op="read"} %d
rdma_remote_operations_total{op="write"} %d
`, bt.Exposures+1, bt.RemoteBytesRead+50, bt.RemoteBytesWritten+200, bt.RemoteReads+1, bt.RemoteWrites+2)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rdma_exposures_total", "rdma_remote_bytes_total", "rdma_remote_operations_total"))
	// The soft engine's counters are there, one series per label value.
	n, err := testutil.GatherAndCount(reg, "rdma_soft_rnr_naks_total", "rdma_soft_retransmits_total", "rdma_soft_ack_timeouts_total",
		"rdma_soft_retry_exceeded_total", "rdma_soft_admission_total", "rdma_soft_shm_offers_total", "rdma_soft_shm_dials_total")
	require.NoError(t, err)
	assert.Equal(t, 2+1+1+2+4+2+2, n)
	n, err = testutil.GatherAndCount(reg, "rdma_rendezvous_total")
	require.NoError(t, err)
	assert.Equal(t, 3, n, "sent_window, sent_registration, received")
	// The one connection's request offered shared memory (both ends on
	// this host), and the listener took it: counted on both sides.
	want = fmt.Sprintf(`
# HELP rdma_soft_shm_offers_total Soft provider: handshakes this process's listeners answered whose request offered shared memory, by answer: accepted (the connection may use it: it starts on TCP and moves once it talks) or refused (it stays on TCP). Counts handshakes, not connections on shared memory: rdma_connections_open{path="soft-shm"} counts those.
# TYPE rdma_soft_shm_offers_total counter
rdma_soft_shm_offers_total{answer="accepted"} %d
rdma_soft_shm_offers_total{answer="refused"} %d
# HELP rdma_soft_shm_dials_total Soft provider: handshakes of this process's dials that offered shared memory, by the listener's answer: accepted (the connection may use it: it starts on TCP and moves once it talks) or refused (it stays on TCP). Counts handshakes, not connections on shared memory: rdma_connections_open{path="soft-shm"} counts those.
# TYPE rdma_soft_shm_dials_total counter
rdma_soft_shm_dials_total{answer="accepted"} %d
rdma_soft_shm_dials_total{answer="refused"} %d
`, bs.ShmOffersAccepted+1, bs.ShmOffersRefused, bs.ShmDialsAccepted+1, bs.ShmDialsRefused)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "rdma_soft_shm_offers_total", "rdma_soft_shm_dials_total"))

	// Closed connections stay in the totals.
	c.Close()
	s.Close()
	want = fmt.Sprintf(`
# HELP rdma_bytes_total Stream bytes: written by Write (direction=sent) or returned by Read (direction=received).
# TYPE rdma_bytes_total counter
rdma_bytes_total{direction="received"} %d
rdma_bytes_total{direction="sent"} %d
# HELP rdma_connections_closed_total Connections closed since the process started.
# TYPE rdma_connections_closed_total counter
rdma_connections_closed_total %d
`, bt.BytesReceived+6000, bt.BytesSent+6000, bt.Closed+2)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rdma_bytes_total", "rdma_connections_closed_total"))
	open = openByPath(t, reg)
	assert.Equal(t, float64(base.Open), open["soft/soft-tcp"]+open["soft/soft-shm"], "%v", open)
	assert.Equal(t, 0.0, open["rdmacore/rdmacore"], "%v", open)
}

// openByPath is rdma_connections_open's series, by "provider/path".
func openByPath(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "rdma_connections_open" {
			continue
		}
		require.Equal(t, "GAUGE", mf.GetType().String())
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["provider"]+"/"+labels["path"]] = m.GetGauge().GetValue()
		}
	}
	return out
}
