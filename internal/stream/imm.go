package stream

// Immediate data of every RDMA write with immediate (host order; the verbs
// layer converts). The top two bits are the kind:
//
//	00 data:    bits 0..28 = bytes written at the next ring position (>= 1);
//	            bit 29 = the ring's generation (version 3): it flips when
//	            the sender moves to a ring the receiver offered (CtlRing)
//	01 credit:  bits 20..29 = receive WRs reposted, bits 0..19 = ring bytes
//	            consumed, in units of 1<<CreditShift(ring size)
//	10 control: bits 0..29 = CtlFin (no more data from the sender),
//	            CtlPing (answer with a CtlPong; version 2 on), CtlPong,
//	            CtlRing (version 3: the sender offers a new receive ring,
//	            described in RingMsgLen bytes it wrote at the end of the
//	            recipient's current ring, its mailbox), or
//	            CtlRndv (version 4: the sender exposes a range for the
//	            recipient to READ, described in RndvMsgLen bytes it wrote
//	            into the recipient's mailbox at RndvMsgAt; rndv.go),
//	            CtlRndvDone (version 4: the recipient of the last CtlRndv
//	            has read all of it), or
//	            CtlNotify | value (bit 29 set, bits 0..28 the sender's
//	            value): a write into memory the receiver exposed, outside
//	            the ring, has landed (ByteLen bytes of it)
//	11 reserved (a protocol error)
const (
	ImmKindShift  = 30
	ImmKindData   = 0
	ImmKindCredit = 1
	ImmKindCtl    = 2
	immPayload    = 1<<ImmKindShift - 1

	CreditRecvShift = 20
	CreditRecvMax   = 1<<10 - 1
	CreditBytesMax  = 1<<CreditRecvShift - 1

	// ImmDataGen is the data immediate's generation bit; the bits below
	// it carry the length.
	ImmDataGen = 1 << 29
	DataLenMax = ImmDataGen - 1

	CtlFin  = 1
	CtlPing = 2
	CtlPong = 3
	CtlRing = 4
	// CtlNotify marks a notification; the bits below it carry its value.
	CtlNotify      = 1 << 29
	NotifyValueMax = CtlNotify - 1
)

// CreditShift is the unit of byte credits for a ring of 1<<log bytes: small
// enough that a quarter ring is many units, large enough that a whole ring
// fits the 20-bit field.
func CreditShift(log uint8) uint {
	if log <= 19 {
		return 0
	}
	return uint(log) - 19
}

// ImmData is the immediate of a data write of n bytes into a ring of
// generation 0 (the first ring).
func ImmData(n int) uint32 { return uint32(n) }

// ImmCredit is the immediate of a credit message.
func ImmCredit(recvs int, units uint64) uint32 {
	return ImmKindCredit<<ImmKindShift | uint32(recvs)<<CreditRecvShift | uint32(units)
}

// ImmCtl is the immediate of a control message.
func ImmCtl(code uint32) uint32 { return ImmKindCtl<<ImmKindShift | code }

// ImmNotify is the immediate of a write that notifies the receiver with
// value (at most NotifyValueMax).
func ImmNotify(value uint32) uint32 { return ImmCtl(CtlNotify | value&NotifyValueMax) }
