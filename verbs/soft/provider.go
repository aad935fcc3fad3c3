package soft

import (
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// Name is the registry name of the provider.
const Name = "soft"

// DeviceName is the one device the provider offers.
const DeviceName = "soft0"

// Device limits. They follow Soft-RoCE (rxe) so that code sized on the soft
// provider also fits on a real device.
const (
	maxQP        = 1 << 16
	maxQPWR      = 16384
	maxSGE       = 32
	maxCQ        = 1 << 14
	maxCQE       = 32767
	maxMR        = 1 << 18
	maxPD        = 1 << 16
	maxInline    = 256
	maxRdAtom    = 128
	maxMsgSize   = 1 << 31 // IB's limit on one message
	maxMRSize    = 1 << 46
	nodeGUID     = 0x5346_5452_4f43_4530 // "SFTROCE0"
	vendorID     = 0x5346                // not an IEEE OUI: a made-up one for a software device
	portMTU      = verbs.MTU4096
	gidTableSize = 1
)

func init() { verbs.Register(provider{}) }

type provider struct{}

func (provider) Name() string { return Name }

func (provider) Devices() ([]verbs.DeviceInfo, error) {
	return []verbs.DeviceInfo{{Name: DeviceName, GUID: nodeGUID, Transport: "soft"}}, nil
}

func (provider) Open(name string) (verbs.Context, error) {
	if name != DeviceName {
		return nil, verbs.Errorf("ibv_open_device", syscall.ENODEV, "no soft device %q (the soft provider has %q)", name, DeviceName)
	}
	return &device{}, nil
}

func (provider) CreateEventChannel() (verbs.EventChannel, error) { return newEventChannel(), nil }

// device is an opened soft0. Objects created from it keep a count so that
// Close can refuse while they live, as ibv_close_device's callers expect.
type device struct {
	objs   atomic.Int64
	closed atomic.Bool
	shared bool // the CM's own context: Close is a no-op

	epMu sync.Mutex
	ep   *endpoint // its address and listener, once bound (manual.go)
}

// cmContext is the device the connection manager binds IDs to (id->verbs).
var cmContext = &device{shared: true}

func (c *device) Name() string     { return DeviceName }
func (c *device) Provider() string { return Name }

func (c *device) Query() (verbs.DeviceAttr, error) {
	if c.closed.Load() {
		return verbs.DeviceAttr{}, verbs.ErrClosed
	}
	return verbs.DeviceAttr{
		FWVersion:       "soft-1.0",
		NodeGUID:        nodeGUID,
		VendorID:        vendorID,
		MaxMRSize:       maxMRSize,
		MaxQP:           maxQP,
		MaxQPWR:         maxQPWR,
		MaxSGE:          maxSGE,
		MaxCQ:           maxCQ,
		MaxCQE:          maxCQE,
		MaxMR:           maxMR,
		MaxMW:           maxMW,
		MaxPD:           maxPD,
		MaxInlineData:   maxInline,
		MaxQPRdAtom:     maxRdAtom,
		MaxQPInitRdAtom: maxRdAtom,
		PhysPortCnt:     1,
	}, nil
}

func (c *device) QueryPort(port int) (verbs.PortAttr, error) {
	if c.closed.Load() {
		return verbs.PortAttr{}, verbs.ErrClosed
	}
	if port != 1 {
		return verbs.PortAttr{}, verbs.Errorf("ibv_query_port", syscall.EINVAL, "port %d: soft0 has port 1 only", port)
	}
	var lid uint16
	if ep := c.endpoint(); ep != nil {
		lid = ep.lid()
	}
	return verbs.PortAttr{
		LID:        lid,
		State:      verbs.PortActive,
		MaxMTU:     portMTU,
		ActiveMTU:  portMTU,
		GIDTblLen:  gidTableSize,
		LinkLayer:  verbs.LinkLayerEthernet,
		MaxMsgSize: maxMsgSize,
	}, nil
}

// QueryGID reports the device's address as a GID once it is bound (Bind),
// and before that the link-local GID derived from the node GUID, the form
// index 0 takes on RoCE devices.
func (c *device) QueryGID(port, index int) (verbs.GID, error) {
	if c.closed.Load() {
		return verbs.GID{}, verbs.ErrClosed
	}
	if port != 1 || index < 0 || index >= gidTableSize {
		return verbs.GID{}, verbs.Errorf("ibv_query_gid", syscall.EINVAL, "port %d index %d out of range", port, index)
	}
	if ep := c.endpoint(); ep != nil {
		return ep.gid(), nil
	}
	var g verbs.GID
	g[0], g[1] = 0xfe, 0x80
	for i := 0; i < 8; i++ {
		g[8+i] = byte(uint64(nodeGUID) >> (56 - 8*i))
	}
	return g, nil
}

func (c *device) AllocPD() (verbs.PD, error) {
	if c.closed.Load() {
		return nil, verbs.ErrClosed
	}
	c.objs.Add(1)
	return &pd{ctx: c}, nil
}

func (c *device) CreateCompChannel() (verbs.CompChannel, error) {
	if c.closed.Load() {
		return nil, verbs.ErrClosed
	}
	c.objs.Add(1)
	return newCompChannel(c), nil
}

func (c *device) CreateCQ(cqe int, ch verbs.CompChannel) (verbs.CQ, error) {
	if c.closed.Load() {
		return nil, verbs.ErrClosed
	}
	if cqe < 1 || cqe > maxCQE {
		return nil, verbs.Errorf("ibv_create_cq", syscall.EINVAL, "cqe %d outside 1..%d", cqe, maxCQE)
	}
	var cc *compChannel
	if ch != nil {
		var ok bool
		if cc, ok = ch.(*compChannel); !ok {
			return nil, verbs.Errorf("ibv_create_cq", syscall.EINVAL, "completion channel is not from the soft provider")
		}
	}
	c.objs.Add(1)
	return newCQ(c, cqe, cc), nil
}

func (c *device) Close() error {
	if c.shared {
		return nil
	}
	if c.objs.Load() > 0 {
		return verbs.Errorf("ibv_close_device", syscall.EBUSY, "%d objects still use the device", c.objs.Load())
	}
	c.closed.Store(true)
	c.unbind()
	return nil
}

// qpnSeq numbers QPs process-wide; 0 and 1 are special on IB.
var qpnSeq atomic.Uint32

func nextQPN() uint32 { return (qpnSeq.Add(1) + 16) & 0xffffff }
