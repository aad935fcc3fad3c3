package stream

import (
	"encoding/binary"
	"math"
)

// Rings that grow (version 3). A connection starts with a small receive
// ring and moves to a larger one under load, so that an idle connection
// registers little. The receiver decides: it registers the new ring and
// offers it to the sender in a CtlRing message, whose RingMsg it writes
// into the sender's mailbox (the MailboxLen bytes after the end of the
// sender's current receive ring, inside that ring's registration). The
// sender takes the offer at its next data write: that write, and every
// one after it, goes to the new ring, from offset 0, and carries the
// flipped generation bit (ImmDataGen), which tells the receiver where the
// old ring's bytes end. The receiver reads the old ring to there, then
// deregisters it. One move is under way at a time: the receiver offers
// again only once the sender has moved and the reader has left the old
// ring. Credits count in the unit of the largest ring (Hello.GrowLog)
// throughout, so that a credit means the same before and after a move.

// RingMsgLen is the size of a RingMsg on the wire; MailboxLen the room
// every ring has after its end, inside its registration, for the peer's.
const (
	RingMsgLen = mailboxMsgLen
	MailboxLen = 64
)

// The breaches of the ring-growth rules.
const (
	ErrRingVersion  = ProtocolError("ring offer on a connection of protocol version 2 or earlier")
	ErrRingMsg      = ProtocolError("malformed ring offer")
	ErrRingOffer    = ProtocolError("ring offered before the last one was taken")
	ErrRingNotOffer = ProtocolError("data for a ring that was not offered")
)

// RingMsg is a ring offered: where the sender of the offer wants its peer's
// data from now on. Layout, little-endian: address uint64, rkey uint32,
// size log2 uint8, three bytes zero.
type RingMsg struct {
	Addr uint64
	Key  uint32
	Log  uint8
}

// Marshal writes m into b (RingMsgLen bytes).
func (m RingMsg) Marshal(b []byte) { mailboxMsg{m.Addr, m.Key, uint32(m.Log)}.put(b) }

// ParseRingMsg decodes the RingMsg at the start of b (a mailbox).
func ParseRingMsg(b []byte) (RingMsg, error) {
	w, ok := getMailboxMsg(b)
	if !ok || w.w2 > math.MaxUint8 {
		return RingMsg{}, ErrRingMsg
	}
	return RingMsg{Addr: w.addr, Key: w.w1, Log: uint8(w.w2)}, nil
}

// mailboxMsg is the layout the messages written into a mailbox share (a
// RingMsg, a RndvMsg): mailboxMsgLen bytes, little-endian, an address
// uint64 and two uint32 words.
type mailboxMsg struct {
	addr   uint64
	w1, w2 uint32
}

const mailboxMsgLen = 16

func (m mailboxMsg) put(b []byte) {
	_ = b[mailboxMsgLen-1]
	binary.LittleEndian.PutUint64(b, m.addr)
	binary.LittleEndian.PutUint32(b[8:], m.w1)
	binary.LittleEndian.PutUint32(b[12:], m.w2)
}

// getMailboxMsg reads the message at the start of b; ok is false when b
// is too short to hold one.
func getMailboxMsg(b []byte) (m mailboxMsg, ok bool) {
	if len(b) < mailboxMsgLen {
		return m, false
	}
	return mailboxMsg{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])}, true
}

// PrevRing is the ring the peer moved on from: positions below End are
// in it, at offset (pos-Base) & Mask.
type PrevRing struct{ Base, Mask, End uint64 }

// InPrev says the reader has bytes left in the previous ring.
func (r *Recv) InPrev() bool { return r.Head < r.Prev.End }

// Readable is where the reader's next bytes are: their offset in the ring
// they are in (the previous one, prev, while InPrev) and how many follow
// there in a row (wrapping at that ring's end).
func (r *Recv) Readable() (off, n uint64, prev bool) {
	if r.InPrev() {
		return (r.Head - r.Prev.Base) & r.Prev.Mask, r.Prev.End - r.Head, true
	}
	return (r.Head - r.Base) & r.Mask, r.Tail - r.Head, false
}

// CanOffer says a ring of 1<<log bytes may be offered now: the handshake
// agreed on moves, no move is under way, and the ring is no larger than the
// hello announced (GrowLog, whose unit credits count in).
func (r *Recv) CanOffer(log uint8) bool {
	return r.Grows && r.Next == 0 && !r.InPrev() && log >= MinRingLog && log <= r.GrowLog &&
		uint64(1)<<log != r.Size
}

// Offer records that a ring of 1<<log bytes was offered (CanOffer said so).
func (r *Recv) Offer(log uint8) { r.Next = uint64(1) << log }

// offered takes in a CtlRing message's arrival, before its RingMsg is read.
func (s *Send) offered(byteLen uint32) error {
	switch {
	case !s.Grows:
		return ErrRingVersion
	case byteLen != RingMsgLen:
		return ErrRingMsg
	case s.Next.Log != 0:
		return ErrRingOffer
	}
	return nil
}

// Offer takes in the RingMsg of a CtlRing message the stream accepted
// (KindRing): the next data write moves to that ring. A ring larger than
// the hello announced, or one that wraps the address space, is refused.
func (s *Send) Offer(m RingMsg) error {
	switch {
	case !s.Grows:
		return ErrRingVersion
	case s.Next.Log != 0:
		return ErrRingOffer
	case m.Log < MinRingLog || m.Log > s.GrowLog || m.Addr == 0 || m.Addr+(1<<m.Log)+MailboxLen < m.Addr:
		return ErrRingMsg
	}
	s.Next = m
	return nil
}
