package stream

// ProtocolError is a peer's breach of the protocol; the connection fails.
type ProtocolError string

func (e ProtocolError) Error() string { return "protocol error: " + string(e) }

// The breaches a peer's message can commit.
const (
	ErrNoImm         = ProtocolError("message without immediate data")
	ErrDataAfterFin  = ProtocolError("data after FIN")
	ErrDataLength    = ProtocolError("data length does not match the bytes written")
	ErrBeyondWindow  = ProtocolError("data beyond the receive window")
	ErrCreditTooMuch = ProtocolError("credit for more than was sent")
	ErrControl       = ProtocolError("unknown or repeated control message")
	ErrPingVersion   = ProtocolError("heartbeat message on a connection of protocol version 1")
	ErrReservedKind  = ProtocolError("reserved message kind")
)

// Recv is the receiving direction's window: our ring, in which the peer
// writes, and the receive WRs each of its writes consumes. Positions count
// bytes since the connection began (the ring offset is pos & Mask).
type Recv struct {
	Size  uint64 // ring bytes
	Mask  uint64
	Shift uint // byte-credit unit
	Depth int  // receive WRs kept posted

	Tail     uint64 // ring bytes landed
	Head     uint64 // ring bytes consumed by the reader
	Credited uint64 // ring bytes the peer has been told are free
	Owed     int    // receive WRs reposted, not yet credited to the peer
	FinRcvd  bool
	// Pings says the handshake agreed on a version with heartbeats
	// (VersionHeartbeat on): only then may the peer send CtlPing and
	// CtlPong.
	Pings bool
}

// NewRecv is the window of a ring of 1<<ringLog bytes with depth receives.
func NewRecv(ringLog uint8, depth int) Recv {
	size := uint64(1) << ringLog
	return Recv{Size: size, Mask: size - 1, Shift: CreditShift(ringLog), Depth: depth}
}

// Buffered is how many landed bytes the reader has not consumed.
func (r *Recv) Buffered() uint64 { return r.Tail - r.Head }

// Consume marks n bytes read.
func (r *Recv) Consume(n int) { r.Head += uint64(n) }

// CreditDue says what a credit message would return now: ring bytes in
// units, and receive WRs; due when a quarter of either window is owed, or
// when force and anything is.
func (r *Recv) CreditDue(force bool) (recvs int, units uint64, due bool) {
	units = min((r.Head-r.Credited)>>r.Shift, CreditBytesMax)
	recvs = min(r.Owed, CreditRecvMax)
	due = units<<r.Shift >= r.Size/4 || recvs >= r.Depth/4 || (force && (units > 0 || recvs > 0))
	return recvs, units, due
}

// Credit records that a credit message returning recvs and units left.
func (r *Recv) Credit(recvs int, units uint64) {
	r.Credited += units << r.Shift
	r.Owed -= recvs
}

// data takes in a data write of n bytes that landed at Tail.
func (r *Recv) data(n uint64, byteLen uint32) error {
	switch {
	case r.FinRcvd:
		return ErrDataAfterFin
	case n == 0 || uint64(byteLen) != n:
		return ErrDataLength
	case r.Tail&r.Mask+n > r.Size || r.Tail+n > r.Credited+r.Size:
		return ErrBeyondWindow
	}
	r.Tail += n
	return nil
}

// Send is the sending direction's window: the peer's ring and receive WRs,
// as the peer announced and credited them.
type Send struct {
	Size    uint64 // peer ring bytes
	Mask    uint64
	Shift   uint // the peer's byte-credit unit
	Depth   int  // receive WRs the peer keeps posted
	Addr    uint64
	RKey    uint32
	Tail    uint64 // peer ring bytes written (or reserved)
	Acked   uint64 // peer ring bytes the peer has freed
	Credits int    // receive WRs the peer has posted that we may consume
}

// NewSend is the window toward a peer that sent h (checked by ParseHello).
func NewSend(h Hello) Send {
	size := uint64(1) << h.RingLog
	return Send{Size: size, Mask: size - 1, Shift: CreditShift(h.RingLog), Depth: int(h.RecvDepth),
		Addr: h.RingAddr, RKey: h.RingKey, Credits: int(h.RecvDepth)}
}

// Room is how many bytes may be written now, and how many of those fit
// before the ring's end (one write does not wrap).
func (s *Send) Room() (free, toEnd uint64) {
	return s.Size - (s.Tail - s.Acked), s.Size - s.Tail&s.Mask
}

// Reserve claims n bytes (n <= Room) and a message credit for a data write,
// and returns the peer address to write them at.
func (s *Send) Reserve(n uint64) uint64 {
	at := s.Addr + s.Tail&s.Mask
	s.Tail += n
	s.Credits--
	return at
}

// credit takes in a credit message.
func (s *Send) credit(recvs int, units uint64, byteLen uint32) error {
	bytes := units << s.Shift
	if byteLen != 0 || s.Credits+recvs > s.Depth || bytes > s.Tail-s.Acked {
		return ErrCreditTooMuch
	}
	s.Credits += recvs
	s.Acked += bytes
	return nil
}

// Kind is what a peer's message was.
type Kind uint8

const (
	KindData   Kind = ImmKindData
	KindCredit Kind = ImmKindCredit
	KindFin    Kind = ImmKindCtl
	// KindNotify is a write with notification into memory the receiver
	// exposed: the windows are untouched, and the message's receive WR
	// is the receiver's to credit once the notification is taken.
	KindNotify Kind = ImmKindCtl + 1
	KindPing   Kind = ImmKindCtl + 2 // the peer wants a CtlPong
	KindPong   Kind = ImmKindCtl + 3
)

// NotifyValue is the value of a KindNotify message's immediate.
func NotifyValue(imm uint32) uint32 { return imm & NotifyValueMax }

// Receive applies one message from the peer (an RDMA write with immediate
// data imm that wrote byteLen bytes) to the windows. Every value in it is
// checked: a peer that breaks the protocol gets an error, and the windows
// are left as they were.
func Receive(in *Recv, out *Send, imm, byteLen uint32) (Kind, error) {
	payload := uint64(imm & immPayload)
	switch imm >> ImmKindShift {
	case ImmKindData:
		return KindData, in.data(payload, byteLen)
	case ImmKindCredit:
		return KindCredit, out.credit(int(payload>>CreditRecvShift), payload&CreditBytesMax, byteLen)
	case ImmKindCtl:
		if payload&CtlNotify != 0 {
			if in.FinRcvd {
				return KindNotify, ErrDataAfterFin
			}
			return KindNotify, nil
		}
		return in.control(payload, byteLen)
	}
	return 0, ErrReservedKind
}

// control takes in a control message.
func (r *Recv) control(code uint64, byteLen uint32) (Kind, error) {
	var k Kind
	switch code {
	case CtlFin:
		k = KindFin
	case CtlPing:
		k = KindPing
	case CtlPong:
		k = KindPong
	default:
		return KindFin, ErrControl
	}
	switch {
	case byteLen != 0:
		return k, ErrControl
	case k == KindFin && r.FinRcvd:
		return k, ErrControl
	case k != KindFin && !r.Pings:
		return k, ErrPingVersion
	}
	if k == KindFin {
		r.FinRcvd = true
	}
	return k, nil
}
