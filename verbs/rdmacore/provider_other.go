//go:build !cgo || !linux

package rdmacore

import (
	"fmt"
	"runtime"

	"github.com/rdmanet/rdma/verbs"
)

func init() { verbs.Register(provider{}) }

// provider stands in for rdma-core where this package was built without cgo
// or outside Linux: it lists no device, and opening one says why.
type provider struct{}

func (provider) Name() string { return ProviderName }

func (provider) Devices() ([]verbs.DeviceInfo, error) { return []verbs.DeviceInfo{}, nil }

// Available says why rdma-core cannot be used in this build: it wraps
// verbs.ErrNoDevice.
func Available() error {
	return fmt.Errorf("rdmacore: %w: this program was built without cgo or for %s, where rdma-core is not available",
		verbs.ErrNoDevice, runtime.GOOS)
}

func unavailable(op string) error {
	return fmt.Errorf("rdmacore: %s: %w: this program was built without cgo or for %s, where rdma-core is "+
		"not available; use the software provider: Config.Provider \"soft\" or RDMA_PROVIDER=soft",
		op, verbs.ErrNoDevice, runtime.GOOS)
}

func (provider) Open(string) (verbs.Context, error) { return nil, unavailable("open") }

func (provider) CreateEventChannel() (verbs.EventChannel, error) {
	return nil, unavailable("rdma_create_event_channel")
}
