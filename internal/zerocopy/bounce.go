package zerocopy

import (
	"github.com/rdmanet/rdma/internal/regmem"
	"github.com/rdmanet/rdma/verbs"
)

// Bounce is the rendezvous reader's bounce buffer: the destination
// of a rendezvous READ for a Read whose slice is small or not in a Buffer,
// made on the connection's first such READ (the root package's Conn.bounceBuf) and kept until
// its release, and the bytes it holds that no Read took yet. They come
// before anything else in the stream. Reader-owned (rmu).
type Bounce struct {
	blk        regmem.Block
	head, tail int // its unread bytes: blk.buf[head:tail]
}

// Pending reports whether bytes are left to read.
func (bb *Bounce) Pending() bool { return bb.head < bb.tail }

// Unread is the bytes left to read; consumed takes n of them.
func (bb *Bounce) Unread() []byte { return bb.blk.Buf[bb.head:bb.tail] }
func (bb *Bounce) Consumed(n int) { bb.head += n }

// Read copies bytes left into b and takes them.
func (bb *Bounce) Read(b []byte) int {
	n := copy(b, bb.Unread())
	bb.head += n
	return n
}

// Space is the next READ's destination for a rendezvous with left bytes to
// go: the whole buffer or those bytes, whichever is less. The buffer is
// empty (nothing pending).
func (bb *Bounce) Space(left uint64) []byte {
	return bb.blk.Buf[:min(uint64(len(bb.blk.Buf)), left)]
}

// Landed records that a READ filled n bytes of space, of which the first
// took were copied out at once.
func (bb *Bounce) Landed(took, n int) { bb.head, bb.tail = took, n }

// Release deregisters and frees the buffer.
func (bb *Bounce) Release() {
	bb.blk.Release()
	*bb = Bounce{}
}

// Made reports whether the buffer's memory was made (Use).
func (bb *Bounce) Made() bool { return bb.blk.MR != nil }

// Use makes blk, registered for local write, the buffer's memory.
func (bb *Bounce) Use(blk regmem.Block) { bb.blk = blk }

// MR is the buffer's registration, a READ's destination's.
func (bb *Bounce) MR() verbs.MR { return bb.blk.MR }
