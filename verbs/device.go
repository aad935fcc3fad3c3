package verbs

// DeviceInfo names a device a provider can open (ibv_get_device_list).
type DeviceInfo struct {
	Name      string // e.g. "mlx5_0", "rxe0", "soft0"
	GUID      uint64 // node GUID
	Transport string // "InfiniBand", "RoCE", "iWARP", "soft"
}

// DeviceAttr is what ibv_query_device reports, restricted to what users of
// this package need to size their resources.
type DeviceAttr struct {
	FWVersion       string
	NodeGUID        uint64
	VendorID        uint32
	MaxMRSize       uint64 // largest registrable region, bytes
	MaxQP           int
	MaxQPWR         int // max outstanding WRs per send or receive queue
	MaxSGE          int // max scatter/gather entries per WR
	MaxCQ           int
	MaxCQE          int // max entries per CQ
	MaxMR           int
	MaxMW           int // type 2 memory windows; 0: the device has none (PD.AllocMW fails)
	MaxPD           int
	MaxInlineData   int // largest inline send, bytes (a QP capability on hardware)
	MaxQPRdAtom     int // outstanding RDMA READs as target (responder resources)
	MaxQPInitRdAtom int // outstanding RDMA READs as initiator
	PhysPortCnt     int
}

// PortState is ibv_port_state.
type PortState int

const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return "UNKNOWN"
}

// MTU is ibv_mtu: the enumerated path MTU.
type MTU int

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an unknown value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << int(m)
}

// LinkLayer says what a port runs on.
type LinkLayer int

const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

// PortAttr is what ibv_query_port reports.
type PortAttr struct {
	State      PortState
	MaxMTU     MTU
	ActiveMTU  MTU
	GIDTblLen  int
	LID        uint16
	LinkLayer  LinkLayer
	MaxMsgSize uint32
}

// GID is a 128-bit port global identifier (an IPv6-shaped address on RoCE).
type GID [16]byte

// Context is an opened device (struct ibv_context). Ports count from 1.
type Context interface {
	// Name is the device name.
	Name() string
	// Provider is the name of the provider that opened it.
	Provider() string
	// Query is ibv_query_device.
	Query() (DeviceAttr, error)
	// QueryPort is ibv_query_port.
	QueryPort(port int) (PortAttr, error)
	// QueryGID is ibv_query_gid.
	QueryGID(port, index int) (GID, error)
	// AllocPD is ibv_alloc_pd.
	AllocPD() (PD, error)
	// CreateCompChannel is ibv_create_comp_channel.
	CreateCompChannel() (CompChannel, error)
	// CreateCQ is ibv_create_cq: a CQ with room for at least cqe completions,
	// whose events go to ch (nil: no events, poll only).
	CreateCQ(cqe int, ch CompChannel) (CQ, error)
	// Close is ibv_close_device. Objects created from the context must be
	// destroyed first.
	Close() error
}

// PD is a protection domain (struct ibv_pd).
type PD interface {
	// RegMR is ibv_reg_mr. buf must lie inside memory from AllocMemory;
	// anything else (in particular Go heap memory) is refused with EINVAL.
	RegMR(buf []byte, access Access) (MR, error)
	// RegDmaBufMR is ibv_reg_dmabuf_mr: it registers length bytes of the
	// dma-buf fd from offset, memory another driver exports (a GPU's, or
	// host memory through /dev/udmabuf: AllocUdmabuf), so that the device
	// reaches it directly. SGEs and remote requests name its bytes from
	// iova on (MR.Addr). The MR's Bytes is the CPU's view of the memory
	// where the provider has one (soft maps the dma-buf), else nil. The
	// device takes its own reference to the dma-buf: fd may be closed
	// afterwards. Where the device, its driver or the kernel cannot
	// register dma-bufs the error names the device and the reason
	// (EOPNOTSUPP: rxe cannot; soft cannot when the exporter does not
	// allow mmap, as most GPU drivers' dma-bufs do not). docs/design.md
	// says how to register GPU memory.
	RegDmaBufMR(offset uint64, length int, iova uint64, fd int, access Access) (MR, error)
	// CreateQP is ibv_create_qp: an RC QP outside the connection manager,
	// in RESET. Its owner exchanges QP numbers, PSNs and addresses with the
	// peer (over a socket of its own, say) and moves it to RTS with Modify.
	CreateQP(attr *QPInitAttr) (QP, error)
	// AllocMW is ibv_alloc_mw of a type 2 memory window (see MW);
	// EOPNOTSUPP where DeviceAttr.MaxMW is 0.
	AllocMW() (MW, error)
	// Dealloc is ibv_dealloc_pd; it fails with EBUSY while MRs or QPs use it.
	Dealloc() error
}
