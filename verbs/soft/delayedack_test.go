package soft_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs/soft"
)

// Two soft ends of this version agree to delayed ACKs in the handshake;
// a listener keeps a connecting side that did not offer them (an earlier
// version, which would reject the frames' ack-request flag) on immediate
// ACKs.
func TestDelayedAcksNegotiated(t *testing.T) {
	srv, addr := listenSoft(t, net.IPv4(127, 0, 0, 21))
	defer srv.close()
	accepted := make(chan error, 1)
	go func() { accepted <- srv.accept() }()
	cli, err := dialSoft(addr)
	defer cli.close()
	require.NoError(t, err)
	require.NoError(t, <-accepted)
	assert.True(t, soft.DelayedAcks(cli.qp), "the connecting side")
	assert.True(t, soft.DelayedAcks(srv.qp), "the accepting side")

	go func() { accepted <- srv.accept() }()
	flagged, err := soft.OldREPDelayedAcks(addr) // a REQ without the offer
	require.NoError(t, err)
	require.NoError(t, <-accepted)
	assert.False(t, flagged, "a REP to a REQ without the offer carries the flag")
	assert.False(t, soft.DelayedAcks(srv.qp), "the side that accepted a connection without the offer")
}
