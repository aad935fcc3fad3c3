package soft_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// A listener counts the shared-memory offers it takes (a client on this
// host) and those it answers with TCP (an offer it cannot take: here one
// whose setup data is junk); a dialer the answers to its offers.
func TestCountersShmOffers(t *testing.T) {
	prev := soft.SetSharedMemory(true)
	defer soft.SetSharedMemory(prev)
	srv, addr := listenSoft(t, net.IPv4(127, 0, 0, 1))
	defer srv.close()

	before := soft.ReadCounters()
	accepted := make(chan error, 1)
	go func() { accepted <- srv.accept() }()
	cli, err := dialSoft(addr)
	if cli != nil {
		defer cli.close()
	}
	require.NoError(t, err)
	require.NoError(t, <-accepted)
	assert.Equal(t, soft.Counters{ShmOffersAccepted: 1, ShmDialsAccepted: 1}, countedSince(before))

	before = soft.ReadCounters()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(soft.RawREQ(3, []byte("not an offer"))) // TCP and shared memory
	require.NoError(t, err)
	ev, err := srv.event(verbs.EventConnectRequest)
	require.NoError(t, err)
	defer ev.ID.Destroy()
	require.Eventually(t, func() bool { return countedSince(before).ShmOffersRefused == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, soft.Counters{ShmOffersRefused: 1}, countedSince(before))
}

// A dial whose offer of shared memory the listener answers with TCP counts
// it as refused, and goes on over TCP.
func TestCountersShmDialRefused(t *testing.T) {
	prev := soft.SetSharedMemory(true)
	defer soft.SetSharedMemory(prev)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	answered := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			answered <- err
			return
		}
		defer c.Close()
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			answered <- err
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.LittleEndian.Uint16(hdr[6:]))); err != nil {
			answered <- err
			return
		}
		_, err = c.Write(soft.RawREP(1)) // TCP
		answered <- err
		_, _ = io.Copy(io.Discard, c) // until the dialer closes
	}()
	before := soft.ReadCounters()
	cli, err := dialSoft(ln.Addr().String())
	if cli != nil {
		defer cli.close()
	}
	require.NoError(t, err, "established on TCP")
	require.NoError(t, <-answered)
	assert.Equal(t, soft.Counters{ShmDialsRefused: 1}, countedSince(before))
}
