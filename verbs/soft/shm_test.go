package soft_test

import (
	"net"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
	"github.com/rdmanet/rdma/verbs/verbstest"
)

// The conformance suite once more, with shared memory forced off: TCP, the
// path between hosts, must keep passing (TestConformance runs with the
// default, which on Linux is shared memory between local processes).
func TestConformanceTCP(t *testing.T) {
	prev := soft.SetSharedMemory(false)
	defer soft.SetSharedMemory(prev)
	before := soft.ShmConnections()
	verbstest.Run(t, verbstest.Config{
		Provider:      "soft",
		IP:            net.IPv4(127, 0, 0, 1),
		TCPListener:   true,
		SilencePeer:   func(t *testing.T, q verbs.QP) { soft.Silence(q) },
		PrepareDevice: bindLoopback,
	})
	assert.Equal(t, before, soft.ShmConnections(), "a connection used shared memory although it was off")
}

// TestConformanceShm runs the suite with shared memory on, and checks that
// connections did go through it.
func TestConformanceShm(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shared memory is Linux-only; other platforms use TCP")
	}
	prev := soft.SetSharedMemory(true)
	defer soft.SetSharedMemory(prev)
	before := soft.ShmConnections()
	verbstest.Run(t, verbstest.Config{
		Provider:      "soft",
		IP:            net.IPv4(127, 0, 0, 1),
		TCPListener:   true,
		SilencePeer:   func(t *testing.T, q verbs.QP) { soft.Silence(q) },
		PrepareDevice: bindLoopback,
	})
	assert.Greater(t, soft.ShmConnections(), before, "no connection used shared memory")
	t.Logf("%d connections over shared memory", soft.ShmConnections()-before)
}
