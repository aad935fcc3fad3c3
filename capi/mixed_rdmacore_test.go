package capi

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// A mixed fleet through the C-style API on a real kernel RDMA stack (the
// Soft-RoCE VM, where rxe0 is a device): one server, one client that uses
// the device (provider auto) and one that acts as a host without a device
// (RDMA_PROVIDER=soft). The server accepts both on its one port; messages,
// a broadcast and replies go both ways. Skipped outside the VM.
func TestMixedPeersRDMACore(t *testing.T) {
	ip := testsupport.SoftRoCEHost(t)
	t.Setenv(rdma.ProviderEnv, "")
	srv, err := Init(ip, 0, 4096, true)
	require.NoError(t, err)
	defer srv.Close()
	port := srv.ln.Addr().(*rdma.Addr).Port

	type acc struct {
		idx int
		err error
	}
	accepted := make(chan acc, 2)
	go func() {
		for i := 0; i < 2; i++ {
			idx, err := srv.AcceptPeer()
			accepted <- acc{idx, err}
		}
	}()
	connect := func(provider string) (*Context, int) {
		t.Setenv(rdma.ProviderEnv, provider) // read at dial time
		c, err := Init(ip, 0, 4096, false)
		require.NoError(t, err)
		idx, err := c.ConnectPeer(ip, port)
		require.NoError(t, err)
		require.Equal(t, 0, idx)
		a := <-accepted
		require.NoError(t, a.err)
		return c, a.idx
	}
	hw, hwIdx := connect("")
	defer hw.Close()
	sw, swIdx := connect(rdma.ProviderSoft)
	defer sw.Close()

	provider := func(c *Context, idx int) string {
		p, err := c.peers.slot("test", idx)
		require.NoError(t, err)
		return p.conn.(*rdma.Conn).Provider()
	}
	assert.Equal(t, rdma.ProviderRDMACore, provider(srv, hwIdx))
	assert.Equal(t, rdma.ProviderSoft, provider(srv, swIdx))
	assert.Equal(t, rdma.ProviderRDMACore, provider(hw, 0))
	assert.Equal(t, rdma.ProviderSoft, provider(sw, 0))

	buf := make([]byte, 4096)
	for _, p := range []struct {
		c   *Context
		idx int
		msg string
	}{{hw, hwIdx, "from the host with a device"}, {sw, swIdx, "from the host without one"}} {
		_, err := p.c.Send(0, []byte(p.msg))
		require.NoError(t, err)
		n, err := srv.Recv(p.idx, buf)
		require.NoError(t, err)
		assert.Equal(t, p.msg, string(buf[:n]))
	}
	all := bytes.Repeat([]byte("to all "), 500)
	require.NoError(t, srv.Broadcast(all))
	for _, c := range []*Context{hw, sw} {
		n, err := c.Recv(0, buf)
		require.NoError(t, err)
		assert.Equal(t, all, buf[:n])
	}
}
