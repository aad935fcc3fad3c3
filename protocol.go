package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// The handshake: each side's hello travels in the connection manager's
// private data (connect: at most 56 bytes; accept: at most 196). Layout of
// version 1, little-endian, helloLen bytes:
//
//	0  magic "RDGo"
//	4  version         uint8  protocol version the sender speaks
//	5  flags           uint8  none defined; ignored
//	6  recv depth      uint16 receive WRs the sender keeps posted (initial message credit)
//	8  ring address    uint64 virtual address of the sender's receive ring
//	16 ring rkey       uint32
//	20 ring size log2  uint8  12..30
//	21 reserved        7 bytes, zero
//	28 CRC-32 (IEEE)   uint32 of bytes 0..27
//
// A later version keeps this prefix and may append; a side answers with the
// lower of the two versions. A hello that fails any check is refused: the
// listener rejects the request (the reject's private data is rejectLen bytes:
// magic, version, reason) and the dialer fails.
const (
	helloLen       = 32
	rejectLen      = 6
	protoVersion   = 1
	minRingLog     = 12
	maxRingLog     = 30
	helloMagic     = "RDGo"
	rejectBadHello = 1 // the request's hello was malformed or its version unsupported
	rejectNoRes    = 2 // the listener could not set up the connection's resources
)

// hello is one side's half of the handshake.
type hello struct {
	version   uint8
	recvDepth uint16
	ringAddr  uint64
	ringKey   uint32
	ringLog   uint8 // ring size is 1<<ringLog
}

var errHello = errors.New("rdma: malformed handshake")

func (h hello) marshal() []byte {
	b := make([]byte, helloLen)
	copy(b, helloMagic)
	b[4] = h.version
	binary.LittleEndian.PutUint16(b[6:], h.recvDepth)
	binary.LittleEndian.PutUint64(b[8:], h.ringAddr)
	binary.LittleEndian.PutUint32(b[16:], h.ringKey)
	b[20] = h.ringLog
	binary.LittleEndian.PutUint32(b[28:], crc32.ChecksumIEEE(b[:28]))
	return b
}

// parseHello checks and decodes a hello. Every value a peer controls is
// checked here, so that nothing later trusts it blindly.
func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) < helloLen {
		return h, fmt.Errorf("%w: %d bytes, want at least %d", errHello, len(b), helloLen)
	}
	if string(b[:4]) != helloMagic {
		return h, fmt.Errorf("%w: bad magic", errHello)
	}
	if got, want := binary.LittleEndian.Uint32(b[28:]), crc32.ChecksumIEEE(b[:28]); got != want {
		return h, fmt.Errorf("%w: checksum mismatch", errHello)
	}
	h.version = b[4]
	if h.version < 1 {
		return h, fmt.Errorf("%w: version %d", errHello, h.version)
	}
	if h.version == protoVersion {
		for _, r := range b[21:28] {
			if r != 0 {
				return h, fmt.Errorf("%w: reserved bytes set", errHello)
			}
		}
	}
	h.recvDepth = binary.LittleEndian.Uint16(b[6:])
	h.ringAddr = binary.LittleEndian.Uint64(b[8:])
	h.ringKey = binary.LittleEndian.Uint32(b[16:])
	h.ringLog = b[20]
	if h.recvDepth < minDepth || h.recvDepth > maxRecvDepth {
		return h, fmt.Errorf("%w: receive depth %d out of [%d, %d]", errHello, h.recvDepth, minDepth, maxRecvDepth)
	}
	if h.ringLog < minRingLog || h.ringLog > maxRingLog {
		return h, fmt.Errorf("%w: ring size 2^%d out of [2^%d, 2^%d]", errHello, h.ringLog, minRingLog, maxRingLog)
	}
	if h.ringAddr == 0 || h.ringAddr+(1<<h.ringLog) < h.ringAddr {
		return h, fmt.Errorf("%w: ring address %#x", errHello, h.ringAddr)
	}
	return h, nil
}

func marshalReject(reason byte) []byte {
	b := make([]byte, rejectLen)
	copy(b, helloMagic)
	b[4] = protoVersion
	b[5] = reason
	return b
}

// parseReject returns the reason of a reject sent by this package, or 0.
func parseReject(b []byte) byte {
	if len(b) < rejectLen || string(b[:4]) != helloMagic {
		return 0
	}
	return b[5]
}

func ringLog(size int) uint8 { return uint8(bits.Len(uint(size)) - 1) }

// Immediate data of every RDMA write with immediate (host order; the verbs
// layer converts). The top two bits are the kind:
//
//	00 data:    bits 0..29 = bytes written at the next ring position (>= 1)
//	01 credit:  bits 20..29 = receive WRs reposted, bits 0..19 = ring bytes
//	            consumed, in units of 1<<creditShift(ring size)
//	10 control: bits 0..29 = ctlFin (no more data from the sender)
//	11 reserved (a protocol error)
const (
	immKindShift  = 30
	immKindData   = 0
	immKindCredit = 1
	immKindCtl    = 2
	immPayload    = 1<<immKindShift - 1

	creditRecvShift = 20
	creditRecvMax   = 1<<10 - 1
	creditBytesMax  = 1<<creditRecvShift - 1

	ctlFin = 1
)

// creditShift is the unit of byte credits for a ring of 1<<log bytes: small
// enough that a quarter ring is many units, large enough that a whole ring
// fits the 20-bit field.
func creditShift(log uint8) uint {
	if log <= 19 {
		return 0
	}
	return uint(log) - 19
}

func immData(n int) uint32 { return uint32(n) }

func immCredit(recvs int, units uint64) uint32 {
	return immKindCredit<<immKindShift | uint32(recvs)<<creditRecvShift | uint32(units)
}

func immCtl(code uint32) uint32 { return immKindCtl<<immKindShift | code }
