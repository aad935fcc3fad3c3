package rdma_test

import (
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/conntest"
)

// A peer process stopped for a minute, with the default PeerTimeout (0:
// none, TCP's behaviour), costs no connection on either soft path: its
// transport answers for it (its kernel on the TCP path, its live process
// on shared memory), so the transport's retries are not spent, and only a
// PeerTimeout would end the conns. The two paths pause at once: the peer
// process's environment picks its path (this process offers both).
func TestPeerPausedAMinute(t *testing.T) {
	for _, path := range []struct{ name, env, carrier string }{
		{"tcp", "RDMA_SOFT_SHM=0", "tcp"},
		{"shm", "RDMA_SOFT_SHM=1 RDMA_SOFT_SHM_SWITCH=0", "shm"},
	} {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			conntest.PausedFor(t, conntest.Config{
				RDMA:          rdma.Config{Provider: rdma.ProviderSoft},
				Host:          "127.0.0.1",
				PeerEnv:       []string{path.env},
				Transport:     rdma.SoftCarrier,
				WantTransport: path.carrier,
			}, time.Minute)
		})
	}
}
