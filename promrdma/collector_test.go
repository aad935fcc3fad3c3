package promrdma

import (
	"context"
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

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(NewCollector()))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems, "lint")
	problems, err = testutil.CollectAndLint(NewCollector())
	require.NoError(t, err)
	assert.Empty(t, problems, "lint")

	want := `
# HELP rdma_bytes_total Stream bytes: written by Write (direction=sent) or returned by Read (direction=received).
# TYPE rdma_bytes_total counter
rdma_bytes_total{direction="received"} 6000
rdma_bytes_total{direction="sent"} 6000
# HELP rdma_messages_total Data writes on the wire: posted (direction=sent) or arrived (direction=received).
# TYPE rdma_messages_total counter
rdma_messages_total{direction="received"} 4
rdma_messages_total{direction="sent"} 4
# HELP rdma_connections_open Connections (rdma.Conn and rdma.RsocketConn) open now.
# TYPE rdma_connections_open gauge
rdma_connections_open 2
# HELP rdma_writes_total Write calls that accepted at least a byte.
# TYPE rdma_writes_total counter
rdma_writes_total 4
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rdma_bytes_total", "rdma_messages_total", "rdma_connections_open", "rdma_writes_total"))

	// Closed connections stay in the totals.
	c.Close()
	s.Close()
	want = `
# HELP rdma_bytes_total Stream bytes: written by Write (direction=sent) or returned by Read (direction=received).
# TYPE rdma_bytes_total counter
rdma_bytes_total{direction="received"} 6000
rdma_bytes_total{direction="sent"} 6000
# HELP rdma_connections_closed_total Connections closed since the process started.
# TYPE rdma_connections_closed_total counter
rdma_connections_closed_total 2
# HELP rdma_connections_open Connections (rdma.Conn and rdma.RsocketConn) open now.
# TYPE rdma_connections_open gauge
rdma_connections_open 0
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rdma_bytes_total", "rdma_connections_closed_total", "rdma_connections_open"))
}
