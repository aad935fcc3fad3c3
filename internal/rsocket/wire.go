package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// rsocket's fixed values (rsocket.c).
const (
	// Version is the only protocol version rsocket.c accepts.
	Version = 1

	// FlagNet: the sender's host order is network order; entries written
	// into its target SGL must be big-endian.
	FlagNet = 1 << 0
	// FlagIOMap: the sender has an iomap after its target SGL.
	FlagIOMap = 1 << 1

	// ConnDataLen is the length of the connect private data.
	ConnDataLen = 40
	// SGELen is the length of one target SGL entry.
	SGELen = 16
	// SGLSize is the number of entries in a target SGL.
	SGLSize = 2
	// CtrlSlots bounds credit and control messages in flight
	// (RS_QP_CTRL_SIZE).
	CtrlSlots = 4
	// MaxTransfer is the largest data message rsocket.c sends
	// (RS_MAX_TRANSFER); this side sends no larger ones either.
	MaxTransfer = 64 << 10
	// SendLowWater: a sender waits for this much free send buffer before it
	// posts a message (RS_SNDLOWAT), rather than sending slivers.
	SendLowWater = 2048

	// Defaults of rsocket.c, used by this side unless configured.
	DefaultRecvBuf  = 128 << 10 // def_mem: the rbuf
	DefaultSendBuf  = 128 << 10 // def_wmem
	DefaultQueue    = 384       // def_sqsize, def_rqsize
	DefaultInline   = 64        // def_inline
	MinQueue        = 16        // RS_QP_MIN_SIZE
	MaxQueue        = 0xFFFE    // RS_QP_MAX_SIZE
	MinBuf          = 4 << 10   // this side's floor for either buffer
	MaxBuf          = 1 << 30   // this side's bound on a buffer, its own or a peer's
	maxPeerSGLSlots = 64        // bound on a peer's target SGL entry count
)

// Message opcodes: the top three bits of an immediate (and of a send's WR
// id on this side).
const (
	OpData     = 0
	OpWrite    = 2 // never on the wire
	OpSGL      = 4
	OpIOMapSGL = 6
	OpCtrl     = 7
)

// Control codes of OpCtrl.
const (
	CtrlDisconnect = 0
	CtrlKeepalive  = 1
	CtrlShutdown   = 2
)

const msgDataMask = 1<<29 - 1

// Msg builds an immediate: op in bits 31..29, data in 28..0.
func Msg(op, data uint32) uint32 { return op<<29 | data&msgDataMask }

// MsgOp is the opcode of an immediate.
func MsgOp(imm uint32) uint32 { return imm >> 29 }

// MsgData is the data field of an immediate.
func MsgData(imm uint32) uint32 { return imm & msgDataMask }

// SGE is struct rs_sge: a remotely writable region.
type SGE struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// Put writes s into b (at least SGELen bytes) in the given byte order.
func (s SGE) Put(b []byte, bigEndian bool) {
	_ = b[SGELen-1]
	if bigEndian {
		binary.BigEndian.PutUint64(b, s.Addr)
		binary.BigEndian.PutUint32(b[8:], s.Key)
		binary.BigEndian.PutUint32(b[12:], s.Length)
		return
	}
	binary.LittleEndian.PutUint64(b, s.Addr)
	binary.LittleEndian.PutUint32(b[8:], s.Key)
	binary.LittleEndian.PutUint32(b[12:], s.Length)
}

// ParseSGE reads an SGE from b (at least SGELen bytes) in the given order.
func ParseSGE(b []byte, bigEndian bool) SGE {
	_ = b[SGELen-1]
	if bigEndian {
		return SGE{binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
	}
	return SGE{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])}
}

// ConnData is struct rs_conn_data, the private data of the connect request
// and of its accept. On the wire every multi-byte field is big-endian:
//
//	0  version            uint8   1
//	1  flags              uint8   FlagNet, FlagIOMap
//	2  credits            be16    the sender's receive depth
//	4  reserved           3 bytes
//	7  target_iomap_size  uint8   (scaled; 0 here)
//	8  target_sgl         addr be64, key be32, length be32 (entries)
//	24 data_buf           addr be64, key be32, length be32 (bytes)
type ConnData struct {
	Version   uint8
	Flags     uint8
	Credits   uint16
	IOMapSize uint8
	TargetSGL SGE // the sender's target SGL; Length counts entries
	DataBuf   SGE // the first region of the sender's rbuf
}

// ErrConnData is wrapped by every ParseConnData error.
var ErrConnData = errors.New("rsocket: malformed connection data")

// Marshal writes c into b, which must hold ConnDataLen bytes.
func (c *ConnData) Marshal(b []byte) {
	_ = b[ConnDataLen-1]
	b[0] = c.Version
	b[1] = c.Flags
	binary.BigEndian.PutUint16(b[2:], c.Credits)
	b[4], b[5], b[6] = 0, 0, 0
	b[7] = c.IOMapSize
	c.TargetSGL.Put(b[8:], true)
	c.DataBuf.Put(b[24:], true)
}

// ParseConnData decodes and checks a peer's connection data. b may be
// longer (the connection manager pads private data). Every value that this
// side later relies on is bounded here.
func ParseConnData(b []byte) (ConnData, error) {
	var c ConnData
	if len(b) < ConnDataLen {
		return c, fmt.Errorf("%w: %d bytes, want at least %d", ErrConnData, len(b), ConnDataLen)
	}
	c.Version = b[0]
	c.Flags = b[1]
	c.Credits = binary.BigEndian.Uint16(b[2:])
	c.IOMapSize = b[7]
	c.TargetSGL = ParseSGE(b[8:], true)
	c.DataBuf = ParseSGE(b[24:], true)
	switch {
	case c.Version != Version:
		return c, fmt.Errorf("%w: version %d, want %d", ErrConnData, c.Version, Version)
	case c.Credits == 0:
		return c, fmt.Errorf("%w: no credits", ErrConnData)
	case c.TargetSGL.Length == 0 || c.TargetSGL.Length > maxPeerSGLSlots:
		return c, fmt.Errorf("%w: target SGL of %d entries, want 1..%d", ErrConnData, c.TargetSGL.Length, maxPeerSGLSlots)
	case c.DataBuf.Length == 0 || c.DataBuf.Length > MaxBuf:
		return c, fmt.Errorf("%w: data buffer of %d bytes, want 1..%d", ErrConnData, c.DataBuf.Length, MaxBuf)
	case c.TargetSGL.Addr+uint64(c.TargetSGL.Length)*SGELen < c.TargetSGL.Addr:
		return c, fmt.Errorf("%w: target SGL address %#x wraps", ErrConnData, c.TargetSGL.Addr)
	}
	return c, nil
}

// BigEndianSGL reports whether entries written into the peer's target SGL
// must be big-endian.
func (c *ConnData) BigEndianSGL() bool { return c.Flags&FlagNet != 0 }
