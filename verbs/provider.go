package verbs

import (
	"fmt"
	"sort"
	"sync"
)

// Provider is one implementation of the verbs: a family of devices and a
// connection manager that can reach them.
type Provider interface {
	// Name is the registry name: "soft" or "rdmacore".
	Name() string
	// Devices lists the devices this provider can open. A provider with no
	// usable device returns an empty list and a nil error.
	Devices() ([]DeviceInfo, error)
	// Open opens a device by name (ibv_open_device).
	Open(name string) (Context, error)
	// CreateEventChannel creates a connection manager event channel
	// (rdma_create_event_channel).
	CreateEventChannel() (EventChannel, error)
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Provider{}
)

// Register makes a provider available by its name. Providers call it from
// their package's init; registering a name twice panics, as for sql drivers.
func Register(p Provider) {
	registryMu.Lock()
	defer registryMu.Unlock()
	name := p.Name()
	if _, dup := registry[name]; dup {
		panic("verbs: Register called twice for provider " + name)
	}
	registry[name] = p
}

// Lookup returns the registered provider with the given name.
func Lookup(name string) (Provider, error) {
	registryMu.RLock()
	p, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("verbs: unknown provider %q (registered: %v)", name, Providers())
	}
	return p, nil
}

// Providers lists the registered provider names, sorted.
func Providers() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
