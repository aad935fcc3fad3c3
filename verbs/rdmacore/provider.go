//go:build cgo && linux

package rdmacore

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

func init() { verbs.Register(provider{}) }

// provider is the rdmacore verbs.Provider.
type provider struct{}

func (provider) Name() string { return ProviderName }

// Devices lists the RDMA devices rdma-core finds. A machine without any (or
// without rdma-core's libraries, or whose kernel has no RDMA support, where
// libibverbs says "Function not implemented") gets an empty list and a nil
// error.
func (provider) Devices() ([]verbs.DeviceInfo, error) {
	if loaded() != nil {
		return []verbs.DeviceInfo{}, nil
	}
	list, ctxs, errno := rdmaGetDevices()
	if errno != 0 {
		return []verbs.DeviceInfo{}, nil
	}
	defer rdmaFreeDevices(list)
	out := make([]verbs.DeviceInfo, 0, len(ctxs))
	for _, c := range ctxs {
		out = append(out, verbs.DeviceInfo{Name: ibvDeviceName(c), GUID: ibvDeviceGUID(c), Transport: transportOf(c)})
	}
	return out, nil
}

func transportOf(c ctxPtr) string {
	if ibvTransportIWARP(c) {
		return "iWARP"
	}
	if pa, errno := ibvQueryPort(c, 1); errno == 0 && pa.LinkLayer == verbs.LinkLayerEthernet {
		return "RoCE"
	}
	return "InfiniBand"
}

// useSoft is the way out that every "no device" error names.
const useSoft = "to run without RDMA hardware use the software provider: Config.Provider \"soft\" or RDMA_PROVIDER=soft"

// noDevice is the error of Open and CreateEventChannel on a machine without
// an RDMA device or without rdma-core's libraries: it wraps verbs.ErrNoDevice
// and names the way out.
func noDevice(op string) error {
	if err := loaded(); err != nil {
		return fmt.Errorf("rdmacore: %s: %w; %s", op, err, useSoft)
	}
	cause := ""
	if errno := ibvGetDeviceListErrno(); errno != 0 {
		cause = fmt.Sprintf(" (ibv_get_device_list: %v)", errno)
	}
	return fmt.Errorf("rdmacore: %s: %w%s; %s", op, verbs.ErrNoDevice, cause, useSoft)
}

// Open opens a device by name; "" opens the first one. The context is the
// one librdmacm uses for that device, so PDs, CQs and MRs made from it work
// with the QPs of CM IDs bound to the device.
func (provider) Open(name string) (verbs.Context, error) {
	if loaded() != nil {
		return nil, noDevice("open")
	}
	list, ctxs, errno := rdmaGetDevices()
	if errno != 0 || len(ctxs) == 0 {
		if errno == 0 {
			rdmaFreeDevices(list)
		}
		return nil, noDevice("open")
	}
	for _, c := range ctxs {
		if name == "" || ibvDeviceName(c) == name {
			return &context{p: c, list: list}, nil
		}
	}
	rdmaFreeDevices(list)
	return nil, verbs.Errorf("ibv_open_device", syscall.ENODEV, "no RDMA device named %q", name)
}

// CreateEventChannel is rdma_create_event_channel.
func (provider) CreateEventChannel() (verbs.EventChannel, error) {
	if loaded() != nil {
		return nil, noDevice("rdma_create_event_channel")
	}
	list, ctxs, errno := rdmaGetDevices()
	if errno != 0 {
		return nil, noDevice("rdma_create_event_channel")
	}
	rdmaFreeDevices(list)
	if len(ctxs) == 0 {
		return nil, noDevice("rdma_create_event_channel")
	}
	return newEventChannel()
}

// shared holds one context wrapper per device context librdmacm opened, for
// CMID.Context: those contexts live as long as the process.
var shared wrappers[ctxPtr, context]

func sharedContext(p ctxPtr) *context {
	return shared.getOrAdd(p, func() *context { return &context{p: p} })
}

// context is an opened device (verbs.Context). list, when set, is the
// rdma_get_devices array that Open took and Close returns.
type context struct {
	p    ctxPtr
	mu   sync.Mutex
	list devListPtr
}

var _ verbs.Context = (*context)(nil)

func (c *context) Name() string     { return ibvDeviceName(c.p) }
func (c *context) Provider() string { return ProviderName }

func (c *context) Query() (verbs.DeviceAttr, error) {
	a, errno := ibvQueryDevice(c.p)
	if errno != 0 {
		return a, &verbs.Error{Op: "ibv_query_device", Errno: errno}
	}
	a.MaxInlineData = probeMaxInline(c.p)
	return a, nil
}

func (c *context) QueryPort(port int) (verbs.PortAttr, error) {
	if port < 1 || port > 255 {
		return verbs.PortAttr{}, verbs.Errorf("ibv_query_port", syscall.EINVAL, "port %d out of range (ports count from 1)", port)
	}
	a, errno := ibvQueryPort(c.p, port)
	if errno != 0 {
		return a, &verbs.Error{Op: "ibv_query_port", Errno: errno}
	}
	return a, nil
}

func (c *context) QueryGID(port, index int) (verbs.GID, error) {
	if port < 1 || port > 255 || index < 0 {
		return verbs.GID{}, verbs.Errorf("ibv_query_gid", syscall.EINVAL, "port %d index %d out of range", port, index)
	}
	g, errno := ibvQueryGID(c.p, port, index)
	if errno != 0 {
		return g, &verbs.Error{Op: "ibv_query_gid", Errno: errno}
	}
	return g, nil
}

func (c *context) AllocPD() (verbs.PD, error) {
	p, errno := ibvAllocPD(c.p)
	if errno != 0 {
		return nil, &verbs.Error{Op: "ibv_alloc_pd", Errno: errno}
	}
	return &protDomain{p: p, ctx: c.p}, nil
}

func (c *context) CreateCompChannel() (verbs.CompChannel, error) { return newCompChannel(c.p) }

func (c *context) CreateCQ(cqe int, ch verbs.CompChannel) (verbs.CQ, error) {
	return newCQ(c.p, cqe, ch)
}

// Close returns the device list Open took. The device itself stays open in
// librdmacm, which owns it for the life of the process.
func (c *context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.list != nil {
		rdmaFreeDevices(c.list)
		c.list = nil
	}
	return nil
}

// Devices do not report their largest inline send: find it once per device by
// creating throw-away QPs (what a failed ibv_create_qp costs is a syscall).
var (
	inlineMu    sync.Mutex
	inlineCache = map[ctxPtr]int{}
)

func probeMaxInline(ctx ctxPtr) int {
	inlineMu.Lock()
	defer inlineMu.Unlock()
	if v, ok := inlineCache[ctx]; ok {
		return v
	}
	best := 0
	pd, errno := ibvAllocPD(ctx)
	if errno != 0 {
		return 0
	}
	defer ibvDeallocPD(pd)
	cq, _, errno := ibvCreateCQ(ctx, 1, nil)
	if errno != 0 {
		return 0
	}
	defer ibvDestroyCQ(cq)
	try := func(n int) bool {
		c := verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: n}
		qp, errno := ibvCreateQP(pd, cq, cq, &c, false)
		if errno != 0 {
			return false
		}
		ibvDestroyQP(qp)
		return c.MaxInlineData >= n
	}
	lo, hi := 0, 1<<16 // lo works; search the largest working size below hi
	if try(hi) {
		lo = hi
	} else {
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if try(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	best = lo
	inlineCache[ctx] = best
	return best
}
