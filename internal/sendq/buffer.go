package sendq

import "os"

// Buffer is rdma.Conn's send staging: a ring of registered memory that
// Writes copy into and data WRs send from. Positions count bytes since the
// connection began; a position's offset is (pos-base) & mask. Bytes are
// reserved at tail by a writer (which copies into them outside the lock),
// posted once their WR is queued, and free again once that WR completed
// (head). Reserved bytes never wrap: a write that would is preceded by a
// pad to the buffer's end, which counts as posted at once. Guarded by the
// connection's mu.
type Buffer struct {
	Buf    []byte // the current buffer; it grows (ringgrowth.go)
	mask   uint64
	base   uint64 // the position at the current buffer's start
	Tail   uint64 // bytes reserved
	Posted uint64 // bytes posted
	head   uint64 // bytes whose WRs completed
}

// NewBuffer is a send buffer over buf (a power of two in size), whose
// positions start at Start.
func NewBuffer(buf []byte) Buffer {
	start := Start(len(buf))
	return Buffer{Buf: buf, mask: uint64(len(buf) - 1), Tail: start, Posted: start, head: start}
}

// Start is where a connection's send buffer positions start: the
// buffer's last half page, which shares its page with the ring's start
// (the root package's ringOffset), or its second half if it is smaller than a page.
func Start(sbufSize int) uint64 {
	return uint64(sbufSize - min(os.Getpagesize()/2, sbufSize/2))
}

// Room is how many bytes are free, and how many of those follow in a row
// before the buffer's end.
func (s *Buffer) Room() (free, contig uint64) {
	size := uint64(len(s.Buf))
	return size - (s.Tail - max(s.head, s.base)), size - (s.Tail-s.base)&s.mask
}

// Pad skips n bytes to the buffer's end (n is room's contig) rather than
// post a sliver from them. The caller has nothing reserved and unposted
// (a writer posts before it reserves again), so the Pad counts as posted.
func (s *Buffer) Pad(n uint64) {
	s.Tail += n
	s.Posted += n
}

// Reserve claims the next n bytes (n <= room's contig) and returns them.
func (s *Buffer) Reserve(n uint64) []byte {
	off := (s.Tail - s.base) & s.mask
	s.Tail += n
	return s.Buf[off : off+n]
}

// Next is the Next n bytes, unclaimed: where the Next reserve will put
// them (ReadFrom reads into them before it reserves).
func (s *Buffer) Next(n uint64) []byte {
	off := (s.Tail - s.base) & s.mask
	return s.Buf[off : off+n]
}

// Post counts n reserved bytes as posted: their WR is queued.
func (s *Buffer) Post(n uint64) { s.Posted += n }

// Retire frees every byte before end: a WR that sent up to end completed.
func (s *Buffer) Retire(end uint64) { s.head = end }

// InFlight is how many bytes are reserved or posted and not yet retired.
func (s *Buffer) InFlight() uint64 { return s.Tail - s.head }

// SignalSpan is how many of the buffer's bytes may be posted behind the
// last signaled WR before the next one is signaled (Queue.Push): a
// quarter of the buffer while more than half of it is in flight, and no
// limit while less is (NoSpan), when a completion's room is not wanted
// yet. A writer that waits for room has more than half the buffer in
// flight (a write takes at most a quarter, and its pad less), and the WR
// that left it so was signaled, unless a signaled WR after the last
// completed one already was: it always waits behind a signaled WR.
func (s *Buffer) SignalSpan() uint64 {
	if s.Tail-s.head < uint64(len(s.Buf))/2 {
		return NoSpan
	}
	return uint64(len(s.Buf)) / 4
}

// NoSpan is a signal span that no send buffer's bytes reach.
const NoSpan = 1 << 62

// MoveTo continues in buf (a larger buffer), from the current position:
// what is in flight stays in the old one until retired.
func (s *Buffer) MoveTo(buf []byte) {
	s.Buf, s.mask, s.base = buf, uint64(len(buf)-1), s.Tail
}
