package stream

// Rendezvous (version 4). A large write from memory the writer registered
// (an rdma.Buffer) does not go through the ring: the writer registers
// exactly the bytes it writes, on the connection's own protection domain,
// for remote READ only, and sends their descriptor (a RndvMsg) in the
// stream's order: an RDMA WRITE WITH IMMEDIATE of RndvMsgLen bytes into
// the recipient's mailbox at offset RndvMsgAt (after the ring offer's
// slot), immediate CtlRndv. The descriptor takes a receive WR (a message
// credit) and no ring bytes: in the stream it sits at the position the
// ring had reached when it arrived (Tail), and no data follows it until
// the reader is done with it. The reader, reaching it in order, RDMA READs
// the range piece by piece, in whatever sizes its Reads ask for, and when
// it has read all of it sends CtlRndvDone (no bytes, one message credit;
// queued with the last READ and fenced, so that the QP sends it once that
// READ has completed); the writer then deregisters the range (revoking
// the peer's access) and its Write returns. One rendezvous is outstanding
// per direction at a time: the writer's Write waits for the done message
// before it writes anything else.
//
// What the recipient checks: the descriptor's form (RndvMsg.check: a
// length within MaxRndvLen, a range that does not wrap the address
// space), that none is pending, that the connection agreed on version 4,
// and that the writer sends no data, FIN or second descriptor before the
// done message; the writer checks that a done message answers a
// descriptor it sent. Whether the range may be read is the writer's
// device's business (rkey, bounds, access): a forged, stretched or stale
// descriptor makes the reader's READ fail with a remote access error, and
// the connection fails on both sides, as on any NIC. A reader never READs
// more than the Read in progress asked for, into memory that Read owns.
const (
	// VersionRndv is the first version whose connections take rendezvous
	// messages (CtlRndv, CtlRndvDone).
	VersionRndv = 4

	CtlRndv     = 5 // a RndvMsg was written into the recipient's mailbox
	CtlRndvDone = 6 // the recipient of the last RndvMsg has read all of it

	// RndvMsgLen is a RndvMsg's size on the wire; RndvMsgAt its offset in
	// the mailbox (the ring offer's RingMsg is at 0).
	RndvMsgLen = mailboxMsgLen
	RndvMsgAt  = RingMsgLen

	// MaxRndvLen bounds one rendezvous: a longer Write is several.
	MaxRndvLen = 1 << 30
)

// The breaches of the rendezvous rules.
const (
	ErrRndvVersion = ProtocolError("rendezvous message on a connection of protocol version 3 or earlier")
	ErrRndvMsg     = ProtocolError("malformed rendezvous descriptor")
	ErrRndvRepeat  = ProtocolError("rendezvous descriptor while another is pending")
	ErrRndvPending = ProtocolError("data or FIN before the pending rendezvous was read")
	ErrRndvDone    = ProtocolError("rendezvous done message without a rendezvous outstanding")
)

// Kinds of the rendezvous messages (Receive's result).
const (
	// KindRndv is a descriptor: its RndvMsg is in our mailbox, for
	// Recv.TakeRndv.
	KindRndv Kind = ImmKindCtl + 6
	// KindRndvDone says the peer has read our last descriptor's range:
	// revoke it.
	KindRndvDone Kind = ImmKindCtl + 7
)

// RndvMsg describes a range the sender exposes for the recipient to RDMA
// READ. Layout, little-endian: address uint64, length uint32, rkey uint32.
type RndvMsg struct {
	Addr uint64
	Len  uint32
	Key  uint32
}

// Marshal writes m into b (RndvMsgLen bytes).
func (m RndvMsg) Marshal(b []byte) { mailboxMsg{m.Addr, m.Len, m.Key}.put(b) }

// ParseRndvMsg decodes and checks the RndvMsg at the start of b.
func ParseRndvMsg(b []byte) (RndvMsg, error) {
	w, ok := getMailboxMsg(b)
	if !ok {
		return RndvMsg{}, ErrRndvMsg
	}
	m := RndvMsg{Addr: w.addr, Len: w.w1, Key: w.w2}
	if m.Addr == 0 || m.Len == 0 || m.Len > MaxRndvLen || m.Addr+uint64(m.Len) < m.Addr {
		return RndvMsg{}, ErrRndvMsg
	}
	return m, nil
}

// RndvIn is the receiving side's rendezvous: the descriptor pending, and
// how much of it the reader has taken.
type RndvIn struct {
	Agreed  bool // the handshake agreed on version 4 or later
	Pending bool // a descriptor arrived and is not all read
	Msg     RndvMsg
	Taken   uint64 // bytes of Msg's range read so far
}

// RndvOut is the sending side's: whether a descriptor is out, awaiting
// its done message.
type RndvOut struct {
	Agreed bool
	Out    bool
}

// AgreeRndv takes in the version agreed, for both directions.
func AgreeRndv(in *Recv, out *Send, version uint8) {
	in.Rndv.Agreed = version >= VersionRndv
	out.Rndv.Agreed = version >= VersionRndv
}

// rndv takes in a CtlRndv message's arrival, before its RndvMsg is read.
func (r *Recv) rndv(byteLen uint32) error {
	switch {
	case !r.Rndv.Agreed:
		return ErrRndvVersion
	case r.FinRcvd:
		return ErrDataAfterFin
	case r.Rndv.Pending:
		return ErrRndvRepeat
	case byteLen != RndvMsgLen:
		return ErrRndvMsg
	}
	return nil
}

// TakeRndv takes in the RndvMsg of a CtlRndv message the stream accepted
// (KindRndv), read from our mailbox: the reader reaches it once it has
// read every ring byte that landed before it.
func (r *Recv) TakeRndv(b []byte) error {
	m, err := ParseRndvMsg(b)
	if err != nil {
		return err
	}
	if !r.Rndv.Agreed || r.Rndv.Pending {
		return ErrRndvRepeat
	}
	r.Rndv = RndvIn{Agreed: true, Pending: true, Msg: m}
	return nil
}

// RndvNext is where the reader's next rendezvous bytes are: the peer's
// address and rkey, and how many are left (0: no rendezvous is next in the
// stream; ring bytes come first).
func (r *Recv) RndvNext() (addr uint64, key uint32, left uint64) {
	if !r.Rndv.Pending || r.Tail != r.Head {
		return 0, 0, 0
	}
	m := &r.Rndv.Msg
	return m.Addr + r.Rndv.Taken, m.Key, uint64(m.Len) - r.Rndv.Taken
}

// RndvRead records n more bytes of the pending rendezvous read (n <= left)
// and says whether that was all of it: the done message is then due.
func (r *Recv) RndvRead(n uint64) (done bool) {
	r.Rndv.Taken += n
	if r.Rndv.Taken < uint64(r.Rndv.Msg.Len) {
		return false
	}
	r.Rndv = RndvIn{Agreed: r.Rndv.Agreed}
	return true
}

// RndvSent records that a descriptor went out.
func (s *Send) RndvSent() {
	s.Rndv.Out = true
	s.Credits--
}

// rndvDone takes in a CtlRndvDone message.
func (s *Send) rndvDone(byteLen uint32) error {
	switch {
	case !s.Rndv.Agreed:
		return ErrRndvVersion
	case !s.Rndv.Out || byteLen != 0:
		return ErrRndvDone
	}
	s.Rndv.Out = false
	return nil
}
