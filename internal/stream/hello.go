package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// The handshake: each side's hello travels in the connection manager's
// private data (connect: at most 56 bytes; accept: at most 196). Layout,
// little-endian, HelloLen bytes:
//
//	0  magic "RDGo"
//	4  version         uint8  protocol version the sender speaks
//	5  flags           uint8  FlagRDMACM; flags a side does not know are ignored
//	6  recv depth      uint16 receive WRs the sender keeps posted (initial message credit)
//	8  ring address    uint64 virtual address of the sender's receive ring
//	16 ring rkey       uint32
//	20 ring size log2  uint8  MinRingLog..MaxRingLog
//	21 grow log2       uint8  version 3: the largest ring the sender may move
//	                          to (RingLog..MaxRingLog; credits count in its
//	                          unit, CreditShift); version 1 and 2: reserved, zero
//	22 heartbeat       uint16 version 2: milliseconds within which the sender
//	                          wants its pings answered (0: it sends none);
//	                          version 1: reserved, zero
//	24 reserved        4 bytes, zero
//	28 CRC-32 (IEEE)   uint32 of bytes 0..27
//
// A later version keeps this prefix and may append; a side answers with the
// lower of the two versions, and what the connection may do follows the
// version agreed: heartbeat pings (CtlPing, CtlPong) from version 2 on,
// rings that move (CtlRing, the data immediate's generation bit; grow.go)
// from version 3 on, rendezvous (CtlRndv, CtlRndvDone; rndv.go) from
// version 4 on, so that a peer is never sent a message it does not
// know. A
// hello that fails any check is refused: the listener rejects the request
// (the reject's private data is RejectLen bytes: magic, version, reason)
// and the dialer fails.
const (
	HelloLen  = 32
	RejectLen = 6
	Version   = 4
	// VersionHeartbeat is the first version whose conns answer pings.
	VersionHeartbeat = 2
	// VersionGrow is the first whose rings move (grow.go).
	VersionGrow  = 3
	MinRingLog   = 12
	MaxRingLog   = 30
	MinRecvDepth = 8
	MaxRecvDepth = 1023 // a credit message returns at most CreditRecvMax receives
	helloMagic   = "RDGo"

	// FlagRDMACM, in a listener's hello: the listener also takes
	// connections over the RDMA connection manager at this address (a
	// mixed listener answering on its soft side), so a dialer with a
	// device should use that next time.
	FlagRDMACM = 1 << 0

	RejectBadHello    = 1 // the request's hello was malformed or its version unsupported
	RejectNoResources = 2 // the listener could not set up the connection's resources
)

// Hello is one side's half of the handshake.
type Hello struct {
	Version   uint8
	Flags     uint8
	RecvDepth uint16 // receive WRs kept posted: the peer's initial message credit
	RingAddr  uint64 // the receive ring's address, for the peer's RDMA writes
	RingKey   uint32 // its rkey
	RingLog   uint8  // the ring is 1<<RingLog bytes
	// GrowLog (version 3 on): the ring may move to one of up to
	// 1<<GrowLog bytes; at least RingLog.
	GrowLog uint8
	// Heartbeat (version 2 on) is how soon, in milliseconds, the sender
	// wants its pings answered; 0: it sends none. A receiver bounds it by
	// its own limits before use (it sets how often the receiver wakes).
	Heartbeat uint16
}

// ErrHello is the error of every malformed hello.
var ErrHello = errors.New("rdma: malformed handshake")

// Marshal encodes h (HelloLen bytes).
func (h Hello) Marshal() []byte {
	b := make([]byte, HelloLen)
	copy(b, helloMagic)
	b[4] = h.Version
	b[5] = h.Flags
	binary.LittleEndian.PutUint16(b[6:], h.RecvDepth)
	binary.LittleEndian.PutUint64(b[8:], h.RingAddr)
	binary.LittleEndian.PutUint32(b[16:], h.RingKey)
	b[20] = h.RingLog
	if h.Version >= VersionGrow {
		b[21] = h.GrowLog
	}
	if h.Version >= VersionHeartbeat {
		binary.LittleEndian.PutUint16(b[22:], h.Heartbeat)
	}
	binary.LittleEndian.PutUint32(b[28:], crc32.ChecksumIEEE(b[:28]))
	return b
}

// ParseHello checks and decodes a hello. Every value a peer controls is
// checked here, so that nothing later trusts it blindly.
func ParseHello(b []byte) (Hello, error) {
	var h Hello
	if len(b) < HelloLen {
		return h, fmt.Errorf("%w: %d bytes, want at least %d", ErrHello, len(b), HelloLen)
	}
	if string(b[:4]) != helloMagic {
		return h, fmt.Errorf("%w: bad magic", ErrHello)
	}
	if got, want := binary.LittleEndian.Uint32(b[28:]), crc32.ChecksumIEEE(b[:28]); got != want {
		return h, fmt.Errorf("%w: checksum mismatch", ErrHello)
	}
	h.Version = b[4]
	if h.Version < 1 {
		return h, fmt.Errorf("%w: version %d", ErrHello, h.Version)
	}
	// The reserved bytes of the versions this side knows must be zero; a
	// later version may use them.
	if h.Version >= VersionHeartbeat {
		h.Heartbeat = binary.LittleEndian.Uint16(b[22:])
	}
	if h.Version <= Version && !reservedZero(b, h.Version) {
		return h, fmt.Errorf("%w: reserved bytes set", ErrHello)
	}
	h.Flags = b[5]
	h.RecvDepth = binary.LittleEndian.Uint16(b[6:])
	h.RingAddr = binary.LittleEndian.Uint64(b[8:])
	h.RingKey = binary.LittleEndian.Uint32(b[16:])
	h.RingLog = b[20]
	if h.RecvDepth < MinRecvDepth || h.RecvDepth > MaxRecvDepth {
		return h, fmt.Errorf("%w: receive depth %d out of [%d, %d]", ErrHello, h.RecvDepth, MinRecvDepth, MaxRecvDepth)
	}
	if h.RingLog < MinRingLog || h.RingLog > MaxRingLog {
		return h, fmt.Errorf("%w: ring size 2^%d out of [2^%d, 2^%d]", ErrHello, h.RingLog, MinRingLog, MaxRingLog)
	}
	if h.RingAddr == 0 || h.RingAddr+(1<<h.RingLog)+MailboxLen < h.RingAddr {
		return h, fmt.Errorf("%w: ring address %#x", ErrHello, h.RingAddr)
	}
	h.GrowLog = h.RingLog
	if h.Version >= VersionGrow {
		h.GrowLog = b[21]
		if h.GrowLog < h.RingLog || h.GrowLog > MaxRingLog {
			return h, fmt.Errorf("%w: ring growth to 2^%d out of [2^%d, 2^%d]", ErrHello, h.GrowLog, h.RingLog, MaxRingLog)
		}
	}
	return h, nil
}

// reservedZero reports whether the bytes version v reserves are zero.
func reservedZero(b []byte, v uint8) bool {
	for i := 21; i < 28; i++ {
		if v >= VersionHeartbeat && (i == 22 || i == 23) || v >= VersionGrow && i == 21 {
			continue
		}
		if b[i] != 0 {
			return false
		}
	}
	return true
}

// MarshalReject encodes a reject's private data.
func MarshalReject(reason byte) []byte {
	b := make([]byte, RejectLen)
	copy(b, helloMagic)
	b[4] = Version
	b[5] = reason
	return b
}

// ParseReject returns the reason of a reject this protocol sent, or 0.
func ParseReject(b []byte) byte {
	if len(b) < RejectLen || string(b[:4]) != helloMagic {
		return 0
	}
	return b[5]
}

// RingLog is log2 of a power-of-two ring size.
func RingLog(size int) uint8 { return uint8(bits.Len(uint(size)) - 1) }
