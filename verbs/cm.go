package verbs

import (
	"net"
	"time"
)

// CMEventType is rdma_cm_event_type; the values are librdmacm's own.
type CMEventType int

const (
	EventAddrResolved    CMEventType = 0
	EventAddrError       CMEventType = 1
	EventRouteResolved   CMEventType = 2
	EventRouteError      CMEventType = 3
	EventConnectRequest  CMEventType = 4
	EventConnectResponse CMEventType = 5
	EventConnectError    CMEventType = 6
	EventUnreachable     CMEventType = 7
	EventRejected        CMEventType = 8
	EventEstablished     CMEventType = 9
	EventDisconnected    CMEventType = 10
	EventDeviceRemoval   CMEventType = 11
	EventMulticastJoin   CMEventType = 12
	EventMulticastError  CMEventType = 13
	EventAddrChange      CMEventType = 14
	EventTimewaitExit    CMEventType = 15
)

var cmEventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String is rdma_event_str.
func (t CMEventType) String() string {
	if t >= 0 && int(t) < len(cmEventNames) {
		return cmEventNames[t]
	}
	return "UNKNOWN EVENT"
}

// Private data limits of the IB CM, which RoCE shares and the soft provider
// enforces (rdma_connect/rdma_accept/rdma_reject with more fail with EINVAL).
const (
	MaxPrivateDataConnect = 56
	MaxPrivateDataAccept  = 196
	MaxPrivateDataReject  = 148
)

// RejectStatusNoListener is the Status of EventRejected when nothing listens
// at the destination (IB_CM_REJ_INVALID_SERVICE_ID, what IB and RoCE devices report).
const RejectStatusNoListener = 8

// RejectStatusConsumer is the Status of EventRejected when the peer called
// Reject (IB_CM_REJ_CONSUMER_DEFINED).
const RejectStatusConsumer = 28

// MaxAckTimeout is the largest ACK timeout exponent (a 5-bit field).
const MaxAckTimeout = 31

// MaxTOS is the largest IP type of service (an 8-bit field).
const MaxTOS = 255

// ConnParam is struct rdma_conn_param.
type ConnParam struct {
	PrivateData        []byte
	ResponderResources int
	InitiatorDepth     int
	RetryCount         int // 0..7
	RNRRetryCount      int // 0..7, 7 = retry forever
}

// CMEvent is struct rdma_cm_event. Events are plain values: there is nothing
// to acknowledge, and PrivateData belongs to the receiver.
type CMEvent struct {
	Type CMEventType
	// ID the event is about. For EventConnectRequest it is a new CMID for
	// the incoming connection (to Accept or Reject), and Listen is the
	// listening ID it arrived on.
	ID     CMID
	Listen CMID
	// Status is the event's status: an errno for errors, the reject reason
	// for EventRejected, 0 otherwise.
	Status int
	// Param carries the peer's connection parameters and private data on
	// EventConnectRequest, EventEstablished (active side: the accept's
	// private data) and EventRejected (the reject's private data).
	Param ConnParam
}

// PortSpace is rdma_port_space. Only TCP (reliable connected) is supported.
type PortSpace int

const PortSpaceTCP PortSpace = 0x0106

// EventChannel is struct rdma_event_channel: the queue CM events of its IDs
// arrive on.
type EventChannel interface {
	// CreateID is rdma_create_id with RDMA_PS_TCP.
	CreateID() (CMID, error)
	// GetEvent is rdma_get_cm_event: it blocks until an event or the
	// deadline (zero: none), parking on Go's runtime poller. A passed
	// deadline is os.ErrDeadlineExceeded; a closed channel ErrClosed.
	GetEvent(deadline time.Time) (CMEvent, error)
	// Close is rdma_destroy_event_channel; it unblocks GetEvent.
	Close() error
}

// EventNotifier is an EventChannel that can say when an event is queued,
// so that a consumer that only needs to react to the odd event (a
// connection's disconnect) can do without a goroutine parked in GetEvent
// for each channel. The soft provider's channels are; rdmacore's, a
// descriptor each, are not.
type EventNotifier interface {
	// NotifyEvents makes the channel call f with each event's type as it
	// is queued, on the goroutine that queues it: f must be quick and must
	// not block. The events are still taken with GetEvent. nil stops the
	// calls; none starts after NotifyEvents(nil) or Close has returned.
	NotifyEvents(f func(CMEventType))
}

// CMID is struct rdma_cm_id (RC, port space TCP).
type CMID interface {
	// BindAddr is rdma_bind_addr. Port 0 picks a free port.
	BindAddr(addr *net.TCPAddr) error
	// Listen is rdma_listen.
	Listen(backlog int) error
	// ResolveAddr is rdma_resolve_addr (src may be nil); the outcome arrives
	// as EventAddrResolved or EventAddrError.
	ResolveAddr(src, dst *net.TCPAddr, timeout time.Duration) error
	// ResolveRoute is rdma_resolve_route: EventRouteResolved or EventRouteError.
	ResolveRoute(timeout time.Duration) error
	// Context is the device the ID is bound to (id->verbs), nil before a
	// bind or address resolution has found one.
	Context() Context
	// CreateQP is rdma_create_qp: an RC QP the CM drives through its states.
	CreateQP(pd PD, attr *QPInitAttr) (QP, error)
	// QP is the QP created on this ID, or nil.
	QP() QP
	// SetAckTimeout is rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT): the
	// local ACK timeout (4.096 us * 2^exp, exp 0..MaxAckTimeout) the QP
	// gets on its RTR->RTS transition. Call it before Connect or Accept:
	// the kernel refuses a Timeout change on an RTS QP (EINVAL), as does
	// soft. ConnParam.RetryCount is the retry count that goes with it.
	SetAckTimeout(exp int) error
	// SetTOS is rdma_set_option(RDMA_OPTION_ID_TOS): the IP type of
	// service (0..255; on RoCE the GRH traffic class) of the connection.
	// Set it before ResolveRoute on the active side, which picks the route
	// with it, and before Accept on the passive side. On soft it is the
	// IP_TOS (IPV6_TCLASS) of the TCP socket that carries the connection.
	SetTOS(tos int) error
	// Connect is rdma_connect (private data <= MaxPrivateDataConnect).
	Connect(param *ConnParam) error
	// Accept is rdma_accept (private data <= MaxPrivateDataAccept).
	Accept(param *ConnParam) error
	// Reject is rdma_reject (private data <= MaxPrivateDataReject).
	Reject(privateData []byte) error
	// Disconnect is rdma_disconnect: both sides get EventDisconnected, and
	// the QPs move to ERR so outstanding WRs flush.
	Disconnect() error
	// Migrate is rdma_migrate_id: future events for the ID go to ch.
	Migrate(ch EventChannel) error
	// LocalAddr and RemoteAddr are rdma_get_local_addr / rdma_get_peer_addr.
	LocalAddr() *net.TCPAddr
	RemoteAddr() *net.TCPAddr
	// Destroy is rdma_destroy_id (the QP must be destroyed first).
	Destroy() error
}
