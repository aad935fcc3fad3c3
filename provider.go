package rdma

import (
	"github.com/rdmanet/rdma/internal/provider"
	"github.com/rdmanet/rdma/verbs"
)

// ProviderEnv is the environment variable read when Config.Provider is empty.
const ProviderEnv = "RDMA_PROVIDER"

// Provider names.
const (
	ProviderSoft     = "soft"
	ProviderRDMACore = "rdmacore"
	ProviderAuto     = "auto"
)

// chooseProvider resolves a Config.Provider value to a registered provider
// (internal/provider), logging the choice.
func chooseProvider(name string) (verbs.Provider, error) {
	return provider.Choose(name, logProviderChoice)
}
