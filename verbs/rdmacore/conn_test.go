//go:build cgo && linux

package rdmacore_test

import (
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/conntest"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs/rdmacore"
)

// rdma.Conn's suite, the one soft passes in `make test`, carried by this
// provider on a real kernel RDMA stack (Soft-RoCE in the VM of
// `make test-softroce`). The VM is emulated (TCG), so the work is sized
// down.
func TestConnSuite(t *testing.T) {
	conntest.Run(t, conntest.Config{
		RDMA:  rdma.Config{Provider: rdmacore.ProviderName},
		Host:  testsupport.SoftRoCEHost(t),
		Small: true,
		// The kernel tears a dead process's connection down at once; a
		// stopped one is found by the heartbeat only (PeerStopped's
		// PeerTimeout of 1 s), its NIC acknowledging for it (PeerPaused).
		// The bound leaves room for the emulated machine.
		DetectWithin: 30 * time.Second,
	})
}

// The suite again with the conns' transfers from and into rdma.Buffers
// and the rendezvous threshold at 4 KiB: every transfer from 4 KiB up
// moves by RDMA READ of a range registered for it, on the kernel's verbs.
func TestConnSuiteBuffers(t *testing.T) {
	conntest.Run(t, conntest.Config{
		RDMA:         rdma.Config{Provider: rdmacore.ProviderName},
		Host:         testsupport.SoftRoCEHost(t),
		Small:        true,
		DetectWithin: 30 * time.Second,
		Buffers:      true,
		Skip: map[string]string{
			"ZeroAllocs":             "a rendezvous registers the Write's bytes per transfer; the copying path's zero allocations are asserted in TestConnSuite",
			"PeerPaused":             "TestConnSuite checks it: a paused peer's conns live by the transport and the heartbeat, whatever a Write copies",
			"PeerPausedUnderTimeout": "TestConnSuite checks it",
		},
	})
}
