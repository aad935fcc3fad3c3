package rdma

import "os"

// sendBuffer is rdma.Conn's send staging: a ring of registered memory that
// Writes copy into and data WRs send from. Positions count bytes since the
// connection began; a position's offset is (pos-base) & mask. Bytes are
// reserved at tail by a writer (which copies into them outside the lock),
// posted once their WR is queued, and free again once that WR completed
// (head). Reserved bytes never wrap: a write that would is preceded by a
// pad to the buffer's end, which counts as posted at once. Guarded by the
// connection's mu.
type sendBuffer struct {
	buf    []byte // the current buffer; it grows (ringgrowth.go)
	mask   uint64
	base   uint64 // the position at the current buffer's start
	tail   uint64 // bytes reserved
	posted uint64 // bytes posted
	head   uint64 // bytes whose WRs completed
}

// newSendBuffer is a send buffer over buf (a power of two in size), whose
// positions start at sendStart.
func newSendBuffer(buf []byte) sendBuffer {
	start := sendStart(len(buf))
	return sendBuffer{buf: buf, mask: uint64(len(buf) - 1), tail: start, posted: start, head: start}
}

// sendStart is where a connection's send buffer positions start: the
// buffer's last half page, which shares its page with the ring's start
// (ringOffset), or its second half if it is smaller than a page.
func sendStart(sbufSize int) uint64 {
	return uint64(sbufSize - min(os.Getpagesize()/2, sbufSize/2))
}

// room is how many bytes are free, and how many of those follow in a row
// before the buffer's end.
func (s *sendBuffer) room() (free, contig uint64) {
	size := uint64(len(s.buf))
	return size - (s.tail - max(s.head, s.base)), size - (s.tail-s.base)&s.mask
}

// pad skips n bytes to the buffer's end (n is room's contig) rather than
// post a sliver from them. The caller has nothing reserved and unposted
// (a writer posts before it reserves again), so the pad counts as posted.
func (s *sendBuffer) pad(n uint64) {
	s.tail += n
	s.posted += n
}

// reserve claims the next n bytes (n <= room's contig) and returns them.
func (s *sendBuffer) reserve(n uint64) []byte {
	off := (s.tail - s.base) & s.mask
	s.tail += n
	return s.buf[off : off+n]
}

// next is the next n bytes, unclaimed: where the next reserve will put
// them (ReadFrom reads into them before it reserves).
func (s *sendBuffer) next(n uint64) []byte {
	off := (s.tail - s.base) & s.mask
	return s.buf[off : off+n]
}

// post counts n reserved bytes as posted: their WR is queued.
func (s *sendBuffer) post(n uint64) { s.posted += n }

// retire frees every byte before end: a WR that sent up to end completed.
func (s *sendBuffer) retire(end uint64) { s.head = end }

// inFlight is how many bytes are reserved or posted and not yet retired.
func (s *sendBuffer) inFlight() uint64 { return s.tail - s.head }

// halfFull says more than half the buffer waits for completions: then
// every send is signaled, so that room comes back before it runs out.
func (s *sendBuffer) halfFull() bool { return s.tail-s.head >= uint64(len(s.buf))/2 }

// moveTo continues in buf (a larger buffer), from the current position:
// what is in flight stays in the old one until retired.
func (s *sendBuffer) moveTo(buf []byte) {
	s.buf, s.mask, s.base = buf, uint64(len(buf)-1), s.tail
}
