package rdma

import (
	"os"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Rings and send buffers that grow with the load. A connection starts with
// a receive ring and a send buffer of growStart bytes at most, one small
// block of registered memory, and moves to Config's sizes (RingSize,
// SendBufferSize) once traffic needs them: an idle connection registers
// about 130 KiB, not 2 MiB (what a NIC pins, and on soft what decides how
// many page-table pages a thousand connections' first touches need), and
// a busy one gets the full window after its first few hundred kilobytes.
//
//   - The ring grows when the peer has written four rings' worth into it,
//     or more than half of it that our reader has not yet freed (the peer
//     is close to waiting for credit). We register a ring of RingSize and offer it (stream.RingMsg,
//     written into the peer's mailbox with a CtlRing immediate); the
//     peer's next data write goes to it, and the old ring is read to its
//     end and deregistered (internal/stream/grow.go has the protocol).
//     Only a peer of protocol version 3 or later moves; toward an older
//     one the listener starts with RingSize at once, and a dialer's ring
//     stays small (the listener's hello comes after the dialer's ring).
//   - The send buffer is local: when a write finds it full while the
//     peer's ring has room, a buffer of SendBufferSize replaces it, and the
//     old one is deregistered once the send WRs posted from it completed.
//
// Each grows once: Config's size is the most it may reach. A ring or send
// buffer that cannot be had (registration refused) leaves the connection
// as it is, at the size it has.

// growStart is the size rings and send buffers start at (Config's, if
// smaller): 64 KiB is what one chunk of a stream fills (maxChunk), so a
// connection's small messages never wait for room.
const growStart = 64 << 10

// growAfterRings is how many rings' worth of data the peer writes before
// its ring grows, whatever our reader does: a stream, not a few messages.
const growAfterRings = 4

// growth is a connection's state once its ring or send buffer grew; only
// connections that moved data get one.
type growth struct {
	// The current ring's and send buffer's own blocks (nil: still the
	// endpoint's first block).
	ringMem, sendMem *verbs.Memory
	next             block // the ring offered to the peer, not yet written to
	prev             block // the ring the peer moved on from, until read
	// The send buffer before the current one, until the send WRs posted
	// before prevSendSeq completed.
	prevSend    block
	prevSendSeq uint64
	failed      bool // a block could not be had: no more tries
}

// block is a ring's or send buffer's memory and its registration.
type block struct {
	mem *verbs.Memory // nil: inside the endpoint's first block
	mr  verbs.MR
	buf []byte // the ring (its mailbox up to cap) or the send buffer
}

func (b *block) release() {
	if b.mr != nil {
		b.mr.Dereg()
	}
	freeMemory(b.mem)
	*b = block{}
}

func (g *growth) release() {
	g.next.release()
	g.prev.release()
	g.prevSend.release()
}

func freeMemory(m *verbs.Memory) {
	if m != nil {
		m.Free()
	}
}

// growthLocked is the connection's growth state, made on the first use.
func (c *Conn) growthLocked() *growth {
	if c.grow == nil {
		c.grow = new(growth)
	}
	return c.grow
}

// newBlock allocates and registers size bytes, plus extra after them
// (inside the registration, outside buf's length). The bytes start half a
// page into the block, as the first block's ring and send positions do
// (endpoint.go): a ring or send buffer at a page boundary would put a
// stream's copies (Write into the send buffer, Read out of the ring) at the
// same offset in a page as the caller's page-aligned buffer, where a copy's
// loads and stores alias (64 KiB streams ran 5% slower).
func (c *Conn) newBlock(size, extra int, access verbs.Access) (block, error) {
	half := os.Getpagesize() / 2
	mem, err := verbs.AllocMemory(half + size + extra)
	if err != nil {
		return block{}, err
	}
	all := mem.Bytes()[half : half+size+extra : half+size+extra]
	mr, err := c.pd.RegMR(all, access)
	if err != nil {
		mem.Free()
		return block{}, err
	}
	return block{mem: mem, mr: mr, buf: all[:size]}, nil
}

// mailbox is where the peer writes its ring offers: after our current ring.
func (c *Conn) mailbox() []byte { return c.ring[len(c.ring):cap(c.ring)] }

// offerRingLocked offers the peer a ring of RingSize when the one it writes
// into is small and the peer streams: it has written four rings' worth
// into it, or more than half of it is in the peer's hands (landed, not yet
// credited back: our reader lags). A message credit and a send slot must
// be free for the offer. The caller checked that the ring is smaller than
// RingSize.
func (c *Conn) offerRingLocked() {
	if c.rx.Tail-c.rx.Base < growAfterRings*c.rx.Size && c.rx.Tail-c.rx.Credited <= c.rx.Size/2 {
		return
	}
	log := stream.RingLog(c.cfg.RingSize)
	// Not while a data write is reserved and not yet queued: its
	// reservation may have moved us to a ring the peer offered, and the
	// peer learns of that move from that write, so an offer queued before
	// it would land in a mailbox the peer does not look in yet. The next
	// data that arrives tries again.
	if !c.rx.CanOffer(log) || c.sq.Reserved > 0 || !c.canSendData() ||
		c.grow != nil && c.grow.failed {
		return
	}
	g := c.growthLocked()
	b, err := c.newBlock(c.cfg.RingSize, stream.MailboxLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		g.failed = true
		return
	}
	// The offer is sent from the new ring's own mailbox: the peer writes
	// there only after it has taken the offer, which it read from there.
	msg := b.buf[len(b.buf):cap(b.buf)][:stream.RingMsgLen]
	stream.RingMsg{Addr: b.mr.Addr(), Key: b.mr.RKey(), Log: log}.Marshal(msg)
	c.enqueueWRLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlRing), b.mr, msg, c.tx.Addr+c.tx.Size, c.tx.RKey, 0, false)
	c.tx.Spend()
	c.rx.Offer(log)
	g.next = b
}

// ringMovedLocked takes in the peer's first write into the ring we
// offered: that ring is ours from now on, and the previous one is read to
// its end (Read) before it goes.
func (c *Conn) ringMovedLocked() {
	g := c.grow
	g.prev = block{mem: g.ringMem, mr: c.ringMR, buf: c.ring}
	g.ringMem, c.ringMR, c.ring = g.next.mem, g.next.mr, g.next.buf
	g.next = block{}
	c.stats.ringGrowths++
	c.logGrowth("receive ring", len(g.prev.buf), len(c.ring))
	// A reader that had read everything is not in the old ring (one
	// copying from it has not consumed what it copies, so it is InPrev).
	c.leftPrevRingLocked()
}

// readRing is the ring the reader's next bytes are in, where, and how many
// follow there: the previous ring, until the reader has read it to where
// the peer moved on.
func (c *Conn) readRingLocked() (ring []byte, off, n uint64) {
	off, n, prev := c.rx.Readable()
	if prev {
		return c.grow.prev.buf, off, n
	}
	return c.ring, off, n
}

// leftPrevRingLocked deregisters and frees the previous ring once the
// reader has read it all (the peer no longer writes there), and nobody
// copies from it: Read calls it after consuming what it copied.
func (c *Conn) leftPrevRingLocked() {
	if c.grow != nil { // inlined: a connection that never grew pays one test
		c.grow.leftPrev(&c.rx)
	}
}

// leftPrev is leftPrevRingLocked's work, kept out of line so that the
// test in front of it inlines.
//
//go:noinline
func (g *growth) leftPrev(rx *stream.Recv) {
	if g.prev.buf != nil && !rx.InPrev() {
		g.prev.release()
	}
}

// growSendLocked replaces a full send buffer with one of SendBufferSize,
// if it is smaller and the last replaced one is gone; the bytes in flight
// stay where they are, and new ones start at the new buffer's start. It
// says whether it did.
func (c *Conn) growSendLocked() bool {
	if len(c.sb.Buf) >= c.cfg.SendBufferSize || c.grow != nil && (c.grow.failed || c.grow.prevSend.mr != nil) {
		return false
	}
	g := c.growthLocked()
	b, err := c.newBlock(c.cfg.SendBufferSize, 0, verbs.AccessLocalWrite)
	if err != nil {
		g.failed = true
		return false
	}
	g.prevSend, g.prevSendSeq = block{mem: g.sendMem, mr: c.sendMR, buf: c.sb.Buf}, c.sq.Posted
	g.sendMem, c.sendMR = b.mem, b.mr
	c.sb.MoveTo(b.buf)
	c.setChunkLocked()
	c.stats.sendGrowths++
	c.logGrowth("send buffer", len(g.prevSend.buf), len(c.sb.Buf))
	return true
}

// retireSendLocked deregisters and frees the previous send buffer once
// every send WR posted from it has completed.
func (c *Conn) retireSendLocked() {
	if c.grow != nil { // inlined, as leftPrevRingLocked
		c.grow.retireSend(c.sq.Done)
	}
}

// retireSend is retireSendLocked's work, kept out of line likewise.
//
//go:noinline
func (g *growth) retireSend(sqDone uint64) {
	if g.prevSend.mr != nil && sqDone >= g.prevSendSeq {
		g.prevSend.release()
	}
}

// setChunkLocked bounds a single RDMA write by a quarter of the peer's
// ring and of the send buffer (and maxChunk), as they are now.
func (c *Conn) setChunkLocked() {
	c.chunk = min(maxChunk, int(c.tx.Size/4), len(c.sb.Buf)/4)
}
