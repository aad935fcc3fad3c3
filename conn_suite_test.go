package rdma_test

import (
	"testing"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/conntest"
	"github.com/rdmanet/rdma/verbs/soft"
)

// rdma.Conn's suite on the soft provider, once per path soft has between
// two ends on one host: shared memory (its default) and TCP (the path
// between hosts). Each run checks that its path carries the bytes, in one
// process and across two. verbs/rdmacore runs the same suite in the
// Soft-RoCE VM.
func TestConnSuite(t *testing.T) {
	for _, path := range []struct {
		name string
		shm  bool
		env  string
	}{
		{"shm", true, "RDMA_SOFT_SHM=1"},
		{"tcp", false, "RDMA_SOFT_SHM=0"},
	} {
		t.Run(path.name, func(t *testing.T) {
			prev := soft.SetSharedMemory(path.shm)
			defer soft.SetSharedMemory(prev)
			conntest.Run(t, conntest.Config{
				RDMA:          rdma.Config{Provider: rdma.ProviderSoft},
				Host:          "127.0.0.1",
				PeerEnv:       []string{path.env},
				Transport:     rdma.SoftCarrier,
				WantTransport: path.name,
			})
		})
	}
}
