package capi

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// One-sided write, notified write and read, and the traffic class, on a
// real kernel RDMA stack (the Soft-RoCE VM, where rxe0 is a device): the
// rkey, bounds and access checks are the kernel's rxe driver's, and a
// forged rkey is refused by it. Skipped outside the VM.
func TestOneSidedRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	t.Setenv(rdma.ProviderEnv, rdma.ProviderRDMACore)
	srv, err := Init(ip, 0, 4096, true)
	require.NoError(t, err)
	defer srv.Close()
	port := srv.ln.Addr().(*rdma.Addr).Port
	accepted := make(chan error, 2)
	go func() {
		for i := 0; i < 2; i++ {
			_, err := srv.AcceptPeer()
			accepted <- err
		}
	}()
	cl, err := Init(ip, 0, 4096, false)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.SetTrafficClass(0xb8))
	_, err = cl.ConnectPeer(ip, port)
	require.NoError(t, err)
	require.NoError(t, <-accepted)
	assert.Equal(t, rdma.ProviderRDMACore, cl.peers.peers[0].conn.(*rdma.Conn).Provider())
	tc, err := cl.TrafficClass(0)
	require.NoError(t, err)
	assert.Equal(t, 0xb8, tc, "the QP's traffic class (ibv_query_qp) after rdma_set_option(TOS)")
	stc, err := srv.TrafficClass(0)
	require.NoError(t, err)
	t.Logf("traffic class: dialer's QP %#x, acceptor's QP %#x", tc, stc)

	target, err := srv.Alloc(1 << 16)
	require.NoError(t, err)
	d, err := srv.Expose(0, target, 0, 1<<16, AccessRead|AccessWrite)
	require.NoError(t, err)
	local, err := cl.Alloc(1 << 16)
	require.NoError(t, err)
	for i := range local.Bytes() {
		local.Bytes()[i] = byte(i*5 + 3)
	}
	_, err = cl.Write(0, &d, 0, local, 0, 1<<15)
	require.NoError(t, err)
	_, err = cl.WriteNotify(0, &d, 1<<15, local, 1<<15, 1<<15, 77)
	require.NoError(t, err)
	v, n, err := srv.WaitNotify(0, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint32(77), v)
	assert.Equal(t, 1<<15, n)
	assert.True(t, bytes.Equal(local.Bytes(), target.Bytes()), "the written bytes")
	back, err := cl.Alloc(1 << 16)
	require.NoError(t, err)
	_, err = cl.Read(0, &d, 0, back, 0, 1<<16)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(target.Bytes(), back.Bytes()), "the read bytes")

	// A second client forges the rkey: rxe refuses it, and only that
	// client's connection breaks.
	att, err := Init(ip, 0, 4096, false)
	require.NoError(t, err)
	defer att.Close()
	_, err = att.ConnectPeer(ip, port)
	require.NoError(t, err)
	require.NoError(t, <-accepted)
	forged := d
	forged[24] ^= 0x5a
	attMem, err := att.Alloc(4096)
	require.NoError(t, err)
	_, err = att.Write(0, &forged, 0, attMem, 0, 64)
	require.ErrorIs(t, err, ErrRemoteAccess)
	_, err = cl.Read(0, &d, 0, back, 0, 64)
	require.NoError(t, err, "the honest client goes on")
}
