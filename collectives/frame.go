package collectives

import (
	"encoding/binary"
	"fmt"
)

// Frame layout (little-endian), hdrLen bytes, then len payload bytes:
//
//	0  seq   uint32  operation sequence number in this Group
//	4  kind  uint8   operation kind
//	5  arg   uint8   element type and reduction op (reductions), else 0
//	6  root  uint16  root rank of rooted operations, else 0
//	8  tag   uint32  algorithm step
//	12 len   uint32  payload length
const hdrLen = 16

const (
	// frameMax bounds one frame's payload: big enough to amortize its
	// header, which is a Write of its own, and the conn's work for it (on
	// soft's TCP path a work request and a system call each way). Between
	// two namespace hosts, AllToAll's 4 and 16 MiB took 0.87 / 0.95 of
	// their time with 256 KiB frames (4 alternated rounds). A multiple of
	// 8, so no element straddles frames.
	frameMax = 1 << 20
	// reducePiece is how much of a frame a receiver reads before it
	// reduces it: a piece stays in the cache between the copy out of the
	// conn and the reduction (a whole 1 MiB frame read first made the
	// AllReduces slower: 1.04 / 1.01 of their time).
	reducePiece = 256 << 10
	// coalesceMax: frames up to this size are written with their header in
	// one Write.
	coalesceMax = 8 << 10
)

type kind uint8

const (
	kindBarrier kind = iota + 1
	kindBroadcast
	kindScatter
	kindGather
	kindAllGather
	kindAllToAll
	kindAllReduce
	kindReduce

	// kindAbort frames say that the sender's group failed; root names the
	// rank it blames and the payload (at most abortTextMax bytes) says why.
	kindAbort kind = 0xff
)

const abortTextMax = 256

var kindNames = [...]string{"?", "Barrier", "Broadcast", "Scatter", "Gather", "AllGather", "AllToAll", "AllReduce", "Reduce"}

func (k kind) String() string {
	if k == kindAbort {
		return "abort"
	}
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type header struct {
	seq  uint32
	kind kind
	arg  uint8
	root uint16
	tag  uint32
	len  uint32
}

func (h *header) put(b []byte) {
	_ = b[hdrLen-1]
	binary.LittleEndian.PutUint32(b[0:], h.seq)
	b[4] = byte(h.kind)
	b[5] = h.arg
	binary.LittleEndian.PutUint16(b[6:], h.root)
	binary.LittleEndian.PutUint32(b[8:], h.tag)
	binary.LittleEndian.PutUint32(b[12:], h.len)
}

func (h *header) get(b []byte) {
	_ = b[hdrLen-1]
	h.seq = binary.LittleEndian.Uint32(b[0:])
	h.kind = kind(b[4])
	h.arg = b[5]
	h.root = binary.LittleEndian.Uint16(b[6:])
	h.tag = binary.LittleEndian.Uint32(b[8:])
	h.len = binary.LittleEndian.Uint32(b[12:])
}

func (h header) String() string {
	return fmt.Sprintf("op #%d %v (root %d, arg %#x, step %d, %d bytes)", h.seq, h.kind, h.root, h.arg, h.tag, h.len)
}

// mismatchError describes a frame that is not the one expected.
type mismatchError struct {
	got, want header
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("got %v, expected %v: ranks called different operations or passed different arguments", e.got, e.want)
}
