// Package provider chooses the verbs provider a connection runs on: the
// one a Config.Provider value or RDMA_PROVIDER names, or, for auto,
// rdmacore when a device has an active port and soft otherwise. The root
// package's Provider names and ProviderEnv are these (a test holds them
// equal).
package provider

import (
	"fmt"
	"os"
	"sync"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/rdmacore" // real devices (a stub without cgo)
	_ "github.com/rdmanet/rdma/verbs/soft"   // the software provider, always available
)

// Env is the environment variable read when Config.Provider is empty.
const Env = "RDMA_PROVIDER"

// Provider names.
const (
	Soft     = "soft"
	RDMACore = "rdmacore"
	Auto     = "auto"
)

// Hardware is the provider auto prefers when it has a device with an
// active port. A variable so that tests can put a provider of their own,
// with a port space of its own, in its place.
var Hardware = RDMACore

// IsAuto reports whether the Config.Provider value name (after the
// environment) leaves the choice to auto.
func IsAuto(name string) bool {
	if name == "" {
		name = os.Getenv(Env)
	}
	return name == "" || name == Auto
}

// Choose resolves a Config.Provider value (name; empty: the environment's,
// Env) to a registered provider, telling logChoice which auto or a request
// for rdmacore chose, and why.
func Choose(name string, logChoice func(asked, chosen, why string)) (verbs.Provider, error) {
	source := "Config.Provider"
	if name == "" {
		name, source = os.Getenv(Env), Env
	}
	switch name {
	case "", Auto:
		if p, err := verbs.Lookup(Hardware); err == nil && HasActiveDevice(p) {
			logChoice(name, p.Name(), "a device has an active port")
			return p, nil
		}
		logChoice(name, Soft, "no RDMA device with an active port (or rdmacore not built in)")
		return verbs.Lookup(Soft)
	case RDMACore:
		// Each failure says what is missing, then how to do without it.
		unusable := func(err error, what string) error {
			return fmt.Errorf("rdma: %s=%s, but %w%s; "+
				"use the software provider instead: set %s=soft (Config.Provider = \"soft\"), or leave it empty to choose automatically",
				source, name, err, what, source)
		}
		p, err := verbs.Lookup(RDMACore)
		if err != nil {
			return nil, unusable(verbs.ErrNoDevice, ": this program was built without the rdmacore provider (it needs cgo on linux)")
		}
		if err := rdmacore.Available(); err != nil {
			return nil, unusable(err, "")
		}
		if !HasActiveDevice(p) {
			return nil, unusable(verbs.ErrNoDevice, " (none with an active port)")
		}
		logChoice(name, p.Name(), source+" asked for it")
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

// HasActiveDevice reports whether p has a device with a port in the ACTIVE
// state. The answer is remembered per provider for the life of the process:
// probing opens every device.
func HasActiveDevice(p verbs.Provider) bool {
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
