package rdma

import "github.com/rdmanet/rdma/verbs"

// bounceBuffer is the rendezvous reader's bounce buffer: the destination
// of a rendezvous READ for a Read whose slice is small or not in a Buffer,
// made on the connection's first such READ (Conn.bounceBuf) and kept until
// its release, and the bytes it holds that no Read took yet. They come
// before anything else in the stream. Reader-owned (rmu).
type bounceBuffer struct {
	blk        block
	head, tail int // its unread bytes: blk.buf[head:tail]
}

// rndvBounceSize is the bounce buffer's size.
const rndvBounceSize = 1 << 20

// bounceBuf is the connection's bounce buffer, made on first use.
// Reader-owned (rmu); released with the endpoint (releaseZeroCopy).
func (c *Conn) bounceBuf() (*bounceBuffer, error) {
	zc := c.zeroCopy()
	if zc.bounce.blk.mr == nil {
		b, err := c.newBlock(rndvBounceSize, 0, verbs.AccessLocalWrite)
		if err != nil {
			return nil, err
		}
		zc.bounce.blk = b
	}
	return &zc.bounce, nil
}

// pending reports whether bytes are left to read.
func (bb *bounceBuffer) pending() bool { return bb.head < bb.tail }

// unread is the bytes left to read; consumed takes n of them.
func (bb *bounceBuffer) unread() []byte { return bb.blk.buf[bb.head:bb.tail] }
func (bb *bounceBuffer) consumed(n int) { bb.head += n }

// read copies bytes left into b and takes them.
func (bb *bounceBuffer) read(b []byte) int {
	n := copy(b, bb.unread())
	bb.head += n
	return n
}

// space is the next READ's destination for a rendezvous with left bytes to
// go: the whole buffer or those bytes, whichever is less. The buffer is
// empty (nothing pending).
func (bb *bounceBuffer) space(left uint64) []byte {
	return bb.blk.buf[:min(uint64(len(bb.blk.buf)), left)]
}

// landed records that a READ filled n bytes of space, of which the first
// took were copied out at once.
func (bb *bounceBuffer) landed(took, n int) { bb.head, bb.tail = took, n }

// release deregisters and frees the buffer.
func (bb *bounceBuffer) release() {
	bb.blk.release()
	*bb = bounceBuffer{}
}
