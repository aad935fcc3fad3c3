package rdma

import (
	"testing"

	"github.com/rdmanet/rdma/internal/core"
)

// The connection core names the root's network in its *net.OpErrors.
func TestCoreNetworkIsNetwork(t *testing.T) {
	if core.Network != Network {
		t.Fatalf("core.Network %q, Network %q", core.Network, Network)
	}
}
