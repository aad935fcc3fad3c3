package rdma

import (
	"fmt"
	"os"
	"sync"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/rdmacore" // real devices (a stub without cgo)
	_ "github.com/rdmanet/rdma/verbs/soft"   // the software provider, always available
)

// ProviderEnv is the environment variable read when Config.Provider is empty.
const ProviderEnv = "RDMA_PROVIDER"

// Provider names.
const (
	ProviderSoft     = "soft"
	ProviderRDMACore = "rdmacore"
	ProviderAuto     = "auto"
)

// chooseProvider resolves a Config.Provider value to a registered provider.
func chooseProvider(name string) (verbs.Provider, error) {
	source := "Config.Provider"
	if name == "" {
		name, source = os.Getenv(ProviderEnv), ProviderEnv
	}
	switch name {
	case "", ProviderAuto:
		if p, err := verbs.Lookup(hardwareProvider); err == nil && hasActiveDevice(p) {
			logProviderChoice(name, p.Name(), "a device has an active port") // debuglog.go
			return p, nil
		}
		logProviderChoice(name, ProviderSoft, "no RDMA device with an active port (or rdmacore not built in)")
		return verbs.Lookup(ProviderSoft)
	case ProviderRDMACore:
		// Each failure says what is missing, then how to do without it.
		unusable := func(err error, what string) error {
			return fmt.Errorf("rdma: %s=%s, but %w%s; "+
				"use the software provider instead: set %s=soft (Config.Provider = \"soft\"), or leave it empty to choose automatically",
				source, name, err, what, source)
		}
		p, err := verbs.Lookup(ProviderRDMACore)
		if err != nil {
			return nil, unusable(verbs.ErrNoDevice, ": this program was built without the rdmacore provider (it needs cgo on linux)")
		}
		if err := rdmacore.Available(); err != nil {
			return nil, unusable(err, "")
		}
		if !hasActiveDevice(p) {
			return nil, unusable(verbs.ErrNoDevice, " (none with an active port)")
		}
		logProviderChoice(name, p.Name(), source+" asked for it")
		return p, nil
	default:
		p, err := verbs.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("rdma: %s=%q: %w", source, name, err)
		}
		return p, nil
	}
}

var activeDevices sync.Map // provider name -> bool

// hasActiveDevice reports whether p has a device with a port in the ACTIVE
// state. The answer is remembered per provider for the life of the process:
// probing opens every device.
func hasActiveDevice(p verbs.Provider) bool {
	if v, ok := activeDevices.Load(p.Name()); ok {
		return v.(bool)
	}
	ok := probeActive(p)
	activeDevices.Store(p.Name(), ok)
	return ok
}

func probeActive(p verbs.Provider) bool {
	devs, err := p.Devices()
	if err != nil {
		return false
	}
	for _, d := range devs {
		ctx, err := p.Open(d.Name)
		if err != nil {
			continue
		}
		attr, err := ctx.Query()
		ports := 1
		if err == nil && attr.PhysPortCnt > 0 {
			ports = attr.PhysPortCnt
		}
		active := false
		for port := 1; port <= ports && !active; port++ {
			pa, err := ctx.QueryPort(port)
			active = err == nil && (pa.State == verbs.PortActive || pa.State == verbs.PortActiveDefer)
		}
		ctx.Close()
		if active {
			return true
		}
	}
	return false
}
