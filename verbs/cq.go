package verbs

import "time"

// WCStatus is ibv_wc_status; the values are libibverbs' own.
type WCStatus int32

const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRdReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "WR flushed", "memory window bind error", "bad response error",
	"local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error",
	"invalid EE context number", "invalid EE context state", "fatal error", "response timeout error",
	"general error",
}

// String is ibv_wc_status_str.
func (s WCStatus) String() string {
	if s >= 0 && int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "unknown"
}

// WCOpcode is ibv_wc_opcode; the values are libibverbs' own.
type WCOpcode int32

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "UNKNOWN"
}

// WCFlags is ibv_wc_flags.
type WCFlags uint32

const (
	WCWithImm WCFlags = 1 << 1 // IBV_WC_WITH_IMM: Imm is valid
)

// WC is a work completion (struct ibv_wc). Only WRID, Status and QPNum are
// meaningful when Status is not WCSuccess; Opcode is then unspecified, as on
// hardware.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32 // bytes received (receive completions)
	Imm       uint32 // immediate data, host byte order, valid with WCWithImm
	QPNum     uint32
	Flags     WCFlags
}

// CQ is a completion queue (struct ibv_cq).
//
// A CQ may be shared: any number of QPs of its device may complete on it,
// as send CQ, receive CQ or both, and a CompChannel may serve any number
// of CQs, so that one waiter serves many connections (UCX's worker,
// libfabric's shared CQs). What holds then, on every provider
// (verbstest's SharedCQ, SharedCQFlushOne and SharedCQOverrun):
//
//   - Every completion names its QP (WC.QPNum) and carries its WR's
//     wr_id; each WR completes once. A QP's completions keep the order RC
//     gives them (send completions in post order, receives in post
//     order); those of different QPs interleave in no promised order.
//   - One ReqNotify arms the CQ for the next completion of any of its QPs
//     and yields one event, however many QPs then complete; the waiter
//     drains them all with Poll and arms again.
//   - A QP moved to ERR (or disconnected) flushes its own outstanding WRs
//     into the CQ with its own QPNum; the other QPs are not touched.
//     Completions a destroyed QP left queued may still be polled (soft
//     keeps them; libmlx5 removes them on destroy), and its number may be
//     given to a new QP: a consumer that dispatches by QPNum moves a QP to ERR and polls
//     until its flushes are seen before destroying it, and drops
//     completions of numbers it does not know.
//   - The CQ must hold every completion its QPs can have outstanding
//     together (signaled sends and posted receives of all of them). An
//     overrun loses completions, makes Poll fail with ErrCQOverrun, and
//     moves every QP that feeds the CQ to ERR, not only the one whose
//     completion did not fit (IBV_EVENT_CQ_ERR on hardware).
type CQ interface {
	// Poll is ibv_poll_cq: it moves up to len(wc) completions into wc and
	// returns how many. It never blocks and allocates nothing. After an
	// overrun it returns ErrCQOverrun.
	Poll(wc []WC) (int, error)
	// ReqNotify is ibv_req_notify_cq: arm the CQ so that the next completion
	// (or next solicited one), of any QP that completes on the CQ, produces
	// one event on its CompChannel. Completions already queued do not;
	// poll again after arming.
	ReqNotify(solicitedOnly bool) error
	// Channel is the completion channel given at creation, or nil.
	Channel() CompChannel
	// Cap is the number of completions the CQ holds (>= the requested cqe).
	Cap() int
	// Destroy is ibv_destroy_cq; it fails with EBUSY while a QP uses it.
	Destroy() error
}

// CompChannel is a completion event channel (struct ibv_comp_channel). Its
// waits park the calling goroutine on Go's runtime poller, never an OS thread.
// It may serve many CQs, each of many QPs (see CQ); GetEvent says which CQ
// an event is for.
type CompChannel interface {
	// GetEvent is ibv_get_cq_event: it blocks until an armed CQ attached to
	// the channel produces an event and returns that CQ, or until the channel
	// is closed (ErrClosed). Each event must be acknowledged with AckEvents
	// on the CQ before the CQ is destroyed; providers that do not need it
	// accept it anyway.
	GetEvent() (CQ, error)
	// SetDeadline bounds GetEvent, pending and future calls alike, as
	// net.Conn's SetReadDeadline bounds Read: once t has passed, GetEvent
	// returns an error that is os.ErrDeadlineExceeded; the zero time means
	// no deadline. Moving the deadline into the past wakes a pending
	// GetEvent at once, so another goroutine can interrupt a waiter (no
	// event is consumed by that). Events that arrive meanwhile stay queued
	// for the next GetEvent.
	SetDeadline(t time.Time) error
	// AckEvents is ibv_ack_cq_events.
	AckEvents(cq CQ, n int)
	// Close destroys the channel (ibv_destroy_comp_channel), unblocking a
	// pending GetEvent with ErrClosed. CQs must not use it afterwards.
	Close() error
}
