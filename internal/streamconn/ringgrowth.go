package streamconn

import (
	"github.com/rdmanet/rdma/internal/regmem"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Rings and send buffers that grow with the load. A connection starts with
// a receive ring and a send buffer of GrowStart bytes at most, one small
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

// GrowStart is the size rings and send buffers start at (Config's, if
// smaller): 64 KiB is what one chunk of a stream fills (maxChunk), so a
// connection's small messages never wait for room.
const GrowStart = 64 << 10

// GrowAfterRings is how many rings' worth of data the peer writes before
// its ring grows, whatever our reader does: a stream, not a few messages.
const GrowAfterRings = 4

// growth is a connection's state once its ring or send buffer grew; only
// connections that moved data get one.
type growth struct {
	// The current ring's and send buffer's own blocks (nil: still the
	// endpoint's first block).
	ringMem, sendMem *verbs.Memory
	next             regmem.Block // the ring offered to the peer, not yet written to
	prev             regmem.Block // the ring the peer moved on from, until read
	// The send buffer before the current one, until the send WRs posted
	// before prevSendSeq completed.
	prevSend    regmem.Block
	prevSendSeq uint64
	failed      bool // a block could not be had: no more tries
}

// Held reports whether an old ring or send buffer, or one offered, is
// still held.
func (g *growth) Held() bool {
	return g.prev.MR != nil || g.prevSend.MR != nil || g.next.MR != nil
}

func (g *growth) release() {
	g.next.Release()
	g.prev.Release()
	g.prevSend.Release()
}

// growing is the connection's part that moves its receive ring and send
// buffer to larger ones (and trims the send queue back, queuegrowth.go):
// its state is growth (Conn.Grow). What a Read and a completion ask of the
// rings on every message (readRingLocked, leftPrevRingLocked,
// retireSendLocked) stays on Conn, where it inlines.
type growing struct{ *Conn }

func (c *Conn) Growing() growing { return growing{c} }

// growthLocked is the connection's growth state, made on the first use.
func (c growing) growthLocked() *growth {
	if c.Grow == nil {
		c.Grow = new(growth)
	}
	return c.Grow
}

// mailbox is where the peer writes its ring offers: after our current ring.
func (c growing) mailbox() []byte { return c.Ring[len(c.Ring):cap(c.Ring)] }

// OfferRingLocked offers the peer a ring of RingSize when the one it writes
// into is small and the peer streams: it has written four rings' worth
// into it, or more than half of it is in the peer's hands (landed, not yet
// credited back: our reader lags). A message credit and a send slot must
// be free for the offer. The caller checked that the ring is smaller than
// RingSize.
func (c growing) OfferRingLocked() {
	if c.RX.Tail-c.RX.Base < GrowAfterRings*c.RX.Size && c.RX.Tail-c.RX.Credited <= c.RX.Size/2 {
		return
	}
	log := stream.RingLog(c.Cfg.RingSize)
	// Not while a data write is reserved and not yet queued: its
	// reservation may have moved us to a ring the peer offered, and the
	// peer learns of that move from that write, so an offer queued before
	// it would land in a mailbox the peer does not look in yet. The next
	// data that arrives tries again.
	if !c.RX.CanOffer(log) || c.SQ.Reserved > 0 || !c.CanSendData() ||
		c.Grow != nil && c.Grow.failed {
		return
	}
	g := c.growthLocked()
	b, err := regmem.New(c.EP.PD, c.Cfg.RingSize, stream.MailboxLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		g.failed = true
		return
	}
	// The offer is sent from the new ring's own mailbox: the peer writes
	// there only after it has taken the offer, which it read from there.
	msg := b.Buf[len(b.Buf):cap(b.Buf)][:stream.RingMsgLen]
	stream.RingMsg{Addr: b.MR.Addr(), Key: b.MR.RKey(), Log: log}.Marshal(msg)
	c.enqueueWRLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlRing), b.MR, msg, c.TX.Addr+c.TX.Size, c.TX.RKey, 0, false)
	c.TX.Spend()
	c.RX.Offer(log)
	g.next = b
}

// ringMovedLocked takes in the peer's first write into the ring we
// offered: that ring is ours from now on, and the previous one is read to
// its end (Read) before it goes.
func (c growing) ringMovedLocked() {
	g := c.Grow
	g.prev = regmem.Block{Mem: g.ringMem, MR: c.EP.RingMR, Buf: c.Ring}
	g.ringMem, c.EP.RingMR, c.Ring = g.next.Mem, g.next.MR, g.next.Buf
	g.next = regmem.Block{}
	c.Core.Counters.RingGrowths++
	c.logGrowth("receive ring", len(g.prev.Buf), len(c.Ring))
	// A reader that had read everything is not in the old ring (one
	// copying from it has not consumed what it copies, so it is InPrev).
	c.leftPrevRingLocked()
}

// readRing is the ring the reader's next bytes are in, where, and how many
// follow there: the previous ring, until the reader has read it to where
// the peer moved on.
func (c *Conn) readRingLocked() (ring []byte, off, n uint64) {
	off, n, prev := c.RX.Readable()
	if prev {
		return c.Grow.prev.Buf, off, n
	}
	return c.Ring, off, n
}

// leftPrevRingLocked deregisters and frees the previous ring once the
// reader has read it all (the peer no longer writes there), and nobody
// copies from it: Read calls it after consuming what it copied.
func (c *Conn) leftPrevRingLocked() {
	if c.Grow != nil { // inlined: a connection that never grew pays one test
		c.Grow.leftPrev(&c.RX)
	}
}

// leftPrev is leftPrevRingLocked's work, kept out of line so that the
// test in front of it inlines.
//
//go:noinline
func (g *growth) leftPrev(rx *stream.Recv) {
	if g.prev.Buf != nil && !rx.InPrev() {
		g.prev.Release()
	}
}

// growSendLocked replaces a full send buffer with one of SendBufferSize,
// if it is smaller and the last replaced one is gone; the bytes in flight
// stay where they are, and new ones start at the new buffer's start. It
// says whether it did.
func (c growing) growSendLocked() bool {
	if len(c.SB.Buf) >= c.Cfg.SendBufferSize || c.Grow != nil && (c.Grow.failed || c.Grow.prevSend.MR != nil) {
		return false
	}
	g := c.growthLocked()
	b, err := regmem.New(c.EP.PD, c.Cfg.SendBufferSize, 0, verbs.AccessLocalWrite)
	if err != nil {
		g.failed = true
		return false
	}
	g.prevSend, g.prevSendSeq = regmem.Block{Mem: g.sendMem, MR: c.EP.SendMR, Buf: c.SB.Buf}, c.SQ.Posted
	g.sendMem, c.EP.SendMR = b.Mem, b.MR
	c.SB.MoveTo(b.Buf)
	c.send().setChunkLocked()
	c.Core.Counters.SendGrowths++
	c.logGrowth("send buffer", len(g.prevSend.Buf), len(c.SB.Buf))
	return true
}

// retireSendLocked deregisters and frees the previous send buffer once
// every send WR posted from it has completed.
func (c *Conn) retireSendLocked() {
	if c.Grow != nil { // inlined, as leftPrevRingLocked
		c.Grow.retireSend(c.SQ.Done)
	}
}

// retireSend is retireSendLocked's work, kept out of line likewise.
//
//go:noinline
func (g *growth) retireSend(sqDone uint64) {
	if g.prevSend.MR != nil && sqDone >= g.prevSendSeq {
		g.prevSend.Release()
	}
}

// setChunkLocked bounds a single RDMA write by a quarter of the peer's
// ring and of the send buffer (and the provider's maxChunk), as they are
// now.
func (c sender) setChunkLocked() {
	limit := maxChunk
	if c.Prov == soft.Name {
		limit = softMaxChunk
	}
	c.chunk = min(limit, int(c.TX.Size/4), len(c.SB.Buf)/4)
}
