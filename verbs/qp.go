package verbs

// QPState is ibv_qp_state.
type QPState int

const (
	QPSReset QPState = 0
	QPSInit  QPState = 1
	QPSRTR   QPState = 2
	QPSRTS   QPState = 3
	QPSSQD   QPState = 4
	QPSSQE   QPState = 5
	QPSErr   QPState = 6
)

func (s QPState) String() string {
	switch s {
	case QPSReset:
		return "RESET"
	case QPSInit:
		return "INIT"
	case QPSRTR:
		return "RTR"
	case QPSRTS:
		return "RTS"
	case QPSSQD:
		return "SQD"
	case QPSSQE:
		return "SQE"
	case QPSErr:
		return "ERR"
	}
	return "UNKNOWN"
}

// QPCap is struct ibv_qp_cap: queue sizes a QP is created with. On creation
// the provider may round the values up and reports what it granted.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr is struct ibv_qp_init_attr for an RC QP.
type QPInitAttr struct {
	SendCQ CQ
	RecvCQ CQ
	Cap    QPCap
	// SignalAll: every send WR produces a completion (sq_sig_all). When
	// false, only WRs with SendSignaled do.
	SignalAll bool
}

// QPAttr is the part of struct ibv_qp_attr that an RC QP's callers use:
// the fields ModifyQP applies (those its mask selects) and QueryQP reports.
// A CM-managed QP needs only State (and the odd timer); a QP created with
// PD.CreateQP is moved through RESET -> INIT -> RTR -> RTS by its owner,
// with the attributes each transition requires (RCTransition).
type QPAttr struct {
	State QPState
	// Cap as granted.
	Cap QPCap
	// PathMTU is the active path MTU (required at INIT->RTR).
	PathMTU MTU
	// MinRNRTimer is the RNR NAK timer advertised to the peer (IB encoding,
	// 0..31; 0 means 655.36 ms as on hardware).
	MinRNRTimer int
	// Timeout is the local ack timeout (4.096 us * 2^Timeout; 0 = infinite).
	Timeout int
	// RetryCnt is the transport retry count (0..7).
	RetryCnt int
	// RNRRetry is the RNR retry count (0..7; 7 retries forever).
	RNRRetry int
	// MaxRdAtomic / MaxDestRdAtomic are initiator depth and responder resources.
	MaxRdAtomic     int
	MaxDestRdAtomic int
	QPNum           uint32
	// DestQPNum is the peer's QP number (required at INIT->RTR).
	DestQPNum uint32
	// RQPSN is the PSN the QP expects of the peer's first request (the
	// peer's SQPSN; required at INIT->RTR), SQPSN the PSN of its own first
	// request (required at RTR->RTS). 24 bits.
	RQPSN uint32
	SQPSN uint32
	// AccessFlags are the remote operations the QP lets its peer perform
	// (AccessRemoteWrite, AccessRemoteRead; required at RESET->INIT): a
	// request the QP does not allow fails as a remote access error, even
	// on an MR that allows it.
	AccessFlags Access
	// PKeyIndex is the partition key's index (0 on RoCE and soft) and
	// PortNum the device port (from 1); both required at RESET->INIT.
	PKeyIndex int
	PortNum   int
	// AH is the path to the peer (required at INIT->RTR).
	AH AHAttr
	// TrafficClass is the traffic class the QP's packets carry: the
	// address vector's GRH traffic class on a device; on soft, the IP TOS
	// (IPV6_TCLASS) of the TCP socket under the QP, read back from the
	// socket. Query reports it; Modify ignores it (set AH.GRH.TrafficClass).
	TrafficClass int
}

// AHAttr is struct ibv_ah_attr: the address vector of the peer's port.
// On InfiniBand a port is reached by its LID; on RoCE by its GID (IsGlobal,
// with the local GID table index to send from), the LID being 0. On soft
// both are needed: the GID is the peer device's IP address and the LID its
// TCP port (see package soft).
type AHAttr struct {
	DLID        uint16
	SL          int
	SrcPathBits int
	StaticRate  int
	IsGlobal    bool
	GRH         GlobalRoute
	PortNum     int
}

// GlobalRoute is struct ibv_global_route: the GRH of a global address vector.
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    int
	HopLimit     int
	TrafficClass int
}

// QPAttrMask selects the fields of QPAttr that ModifyQP applies; the
// values are enum ibv_qp_attr_mask's.
type QPAttrMask uint32

const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxRdAtomic     QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// Opcode is ibv_wr_opcode; the values are libibverbs' own.
type Opcode uint32

const (
	OpRDMAWrite        Opcode = 0
	OpRDMAWriteWithImm Opcode = 1
	OpSend             Opcode = 2
	OpSendWithImm      Opcode = 3
	OpRDMARead         Opcode = 4
	OpLocalInv         Opcode = 7 // IBV_WR_LOCAL_INV: invalidates the window rkey InvalidateRKey
	OpBindMW           Opcode = 8 // IBV_WR_BIND_MW: binds a type 2 window (Bind)
)

func (o Opcode) String() string {
	switch o {
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpSend:
		return "SEND"
	case OpSendWithImm:
		return "SEND_WITH_IMM"
	case OpRDMARead:
		return "RDMA_READ"
	case OpLocalInv:
		return "LOCAL_INV"
	case OpBindMW:
		return "BIND_MW"
	}
	return "UNKNOWN"
}

// SendFlags is ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3 // payload copied at post time; LKeys ignored
)

// SendWR is struct ibv_send_wr. Callers keep and reuse their SendWR values and
// SG arrays: posting copies what it needs and allocates nothing.
type SendWR struct {
	WRID       uint64
	Opcode     Opcode
	Flags      SendFlags
	SG         []SGE
	Imm        uint32 // immediate data, host byte order (the *_WITH_IMM opcodes)
	RemoteAddr uint64 // RDMA_WRITE*, RDMA_READ
	RKey       uint32 // RDMA_WRITE*, RDMA_READ

	// Bind is what OpBindMW binds (the caller keeps it, as SG); SG is
	// then empty.
	Bind *MWBind
	// InvalidateRKey is the rkey OpLocalInv invalidates: a window's
	// that was bound on this QP.
	InvalidateRKey uint32
}

// RecvWR is struct ibv_recv_wr.
type RecvWR struct {
	WRID uint64
	SG   []SGE
}

// QP is a reliable connected queue pair (struct ibv_qp).
type QP interface {
	// Num is the QP number.
	Num() uint32
	// PostSend is ibv_post_send for a list of WRs, posted in order. It never
	// blocks. A full send queue is ENOMEM; a WR that breaks a limit (SGE
	// count, inline size, QP state) is EINVAL. On error, WRs before the
	// failing one are posted and the returned *PostError says which failed.
	PostSend(wrs []SendWR) error
	// PostRecv is ibv_post_recv, with the same rules.
	PostRecv(wrs []RecvWR) error
	// Modify is ibv_modify_qp. On a CM-managed QP the CM drives
	// INIT->RTR->RTS; users typically move it to ERR to flush it. A QP
	// from PD.CreateQP starts in RESET and its owner moves it; a mask
	// that lacks an attribute the transition requires, or has one it does
	// not allow (RCTransition), is EINVAL, as the kernel has it.
	Modify(attr *QPAttr, mask QPAttrMask) error
	// Query is ibv_query_qp.
	Query() (QPAttr, error)
	// Destroy is ibv_destroy_qp (rdma_destroy_qp for CM-managed QPs).
	Destroy() error
}

// PostError reports which WR of a list was refused; the earlier ones were
// posted.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string { return e.Err.Error() }
func (e *PostError) Unwrap() error { return e.Err }
