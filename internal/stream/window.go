package stream

// ProtocolError is a peer's breach of the protocol; the connection fails.
type ProtocolError string

func (e ProtocolError) Error() string { return "protocol error: " + string(e) }

// The breaches a peer's message can commit (those of the ring-growth
// and rendezvous rules are in grow.go and rndv.go).
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
// bytes since the connection began (the ring offset is (pos-Base) & Mask).
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

	// Ring moves (grow.go): the handshake agreed on them (version 3);
	// the position at which the current ring began; the generation bit
	// the peer's writes into it carry; the size of the ring offered to
	// the peer and not yet written to (0: none); the ring the peer moved
	// on from, while the reader has not read all of it. GrowLog is the
	// largest ring this side may offer (its hello's).
	Grows   bool
	GrowLog uint8
	Base    uint64
	Gen     uint32
	Next    uint64
	Prev    PrevRing

	// Rndv is the rendezvous the peer announced (version 4; rndv.go).
	Rndv RndvIn
}

// NewRecv is the window of a ring of 1<<ringLog bytes with depth receives,
// which may grow to 1<<growLog bytes (credits count in that ring's unit).
func NewRecv(ringLog, growLog uint8, depth int) Recv {
	size := uint64(1) << ringLog
	growLog = max(ringLog, growLog)
	return Recv{Size: size, Mask: size - 1, Shift: CreditShift(growLog), Depth: depth, GrowLog: growLog}
}

// Agree takes in the version agreed: below VersionGrow the ring stays
// where it is, and credits count in its own unit.
func (r *Recv) Agree(version uint8) {
	r.Grows = version >= VersionGrow
	if !r.Grows {
		r.GrowLog = RingLog(int(r.Size))
		r.Shift = CreditShift(r.GrowLog)
	}
}

// Buffered is how many landed bytes the reader has not consumed.
func (r *Recv) Buffered() uint64 { return r.Tail - r.Head }

// Consume marks n bytes read.
func (r *Recv) Consume(n int) { r.Head += uint64(n) }

// data takes in a data write that landed at Tail: in the current ring, or
// (its generation bit flipped) the first in the ring offered.
func (r *Recv) data(payload uint64, byteLen uint32) (Kind, error) {
	n, gen := payload&DataLenMax, uint32(payload)&ImmDataGen
	k, size, base := KindData, r.Size, r.Base
	if gen != r.Gen {
		if r.Next == 0 {
			return k, ErrRingNotOffer
		}
		k, size, base = KindDataMoved, r.Next, r.Tail
	}
	switch {
	case r.FinRcvd:
		return k, ErrDataAfterFin
	case r.Rndv.Pending:
		return k, ErrRndvPending
	case n == 0 || uint64(byteLen) != n:
		return k, ErrDataLength
	case (r.Tail-base)&(size-1)+n > size || r.Tail+n > max(r.Credited, base)+size:
		return k, ErrBeyondWindow
	}
	if k == KindDataMoved {
		r.Prev = PrevRing{Base: r.Base, Mask: r.Mask, End: r.Tail}
		r.Size, r.Mask, r.Base, r.Gen, r.Next = size, size-1, base, gen, 0
	}
	r.Tail += n
	return k, nil
}

// Send is the sending direction's window: the peer's ring and receive WRs,
// as the peer announced and credited them. Ring offsets are (pos-Base) &
// Mask.
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

	// Ring moves (grow.go): the handshake agreed on them (version 3);
	// how large the peer's ring may grow; the position at which the
	// current ring began; the generation bit data writes into it carry;
	// the ring the peer offered, taken at the next data write (Log 0:
	// none).
	Grows   bool
	GrowLog uint8
	Base    uint64
	Gen     uint32
	Next    RingMsg

	// Rndv is our rendezvous toward the peer (version 4; rndv.go).
	Rndv RndvOut
}

// NewSend is the window toward a peer that sent h (checked by ParseHello),
// on a connection of the version agreed.
func NewSend(h Hello, version uint8) Send {
	size := uint64(1) << h.RingLog
	s := Send{Size: size, Mask: size - 1, Shift: CreditShift(h.RingLog), Depth: int(h.RecvDepth),
		Addr: h.RingAddr, RKey: h.RingKey, Credits: int(h.RecvDepth), GrowLog: h.RingLog}
	if version >= VersionGrow && h.Version >= VersionGrow {
		s.Grows, s.GrowLog, s.Shift = true, h.GrowLog, CreditShift(h.GrowLog)
	}
	return s
}

// Room is how many bytes may be written now, and how many of those fit
// before the ring's end (one write does not wrap). With a ring offered,
// that is the offered ring, which the next write moves to.
func (s *Send) Room() (free, toEnd uint64) {
	if s.Next.Log != 0 {
		size := uint64(1) << s.Next.Log
		return size, size
	}
	return s.Size - (s.Tail - max(s.Acked, s.Base)), s.Size - (s.Tail-s.Base)&s.Mask
}

// Reserve claims n bytes (n <= Room) and a message credit for a data write,
// and returns the peer address to write them at; moved says the write is
// the first into a ring the peer offered (its immediate, ImmData, carries
// the new generation).
func (s *Send) Reserve(n uint64) (at uint64, moved bool) {
	if s.Next.Log != 0 {
		size := uint64(1) << s.Next.Log
		s.Size, s.Mask, s.Addr, s.RKey = size, size-1, s.Next.Addr, s.Next.Key
		s.Base, s.Gen, s.Next, moved = s.Tail, s.Gen^ImmDataGen, RingMsg{}, true
	}
	at = s.Addr + (s.Tail-s.Base)&s.Mask
	s.Tail += n
	s.Credits--
	return at, moved
}

// ImmData is the immediate of a data write of n bytes, reserved last.
func (s *Send) ImmData(n int) uint32 { return uint32(n) | s.Gen }

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
	// KindRing is the peer's offer of a new ring (CtlRing): its RingMsg
	// is in our mailbox, for Send.Offer.
	KindRing Kind = ImmKindCtl + 4
	// KindDataMoved is data, the first the peer wrote into the ring we
	// offered: the previous one is read to Prev.End, then released.
	KindDataMoved Kind = ImmKindCtl + 5
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
		return in.data(payload, byteLen)
	case ImmKindCredit:
		return KindCredit, out.credit(int(payload>>CreditRecvShift), payload&CreditBytesMax, byteLen)
	case ImmKindCtl:
		if payload&CtlNotify != 0 {
			if in.FinRcvd {
				return KindNotify, ErrDataAfterFin
			}
			return KindNotify, nil
		}
		switch payload {
		case CtlRing:
			return KindRing, out.offered(byteLen)
		case CtlRndv:
			return KindRndv, in.rndv(byteLen)
		case CtlRndvDone:
			return KindRndvDone, out.rndvDone(byteLen)
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
	case k == KindFin && r.Rndv.Pending:
		return k, ErrRndvPending
	case k != KindFin && !r.Pings:
		return k, ErrPingVersion
	}
	if k == KindFin {
		r.FinRcvd = true
	}
	return k, nil
}
