package rsocket

import "fmt"

// Rx is the receiving side of one connection: the rbuf the peer writes into
// (consumed in order, granted half by half), the data messages landed and
// not yet consumed, and when to return credit (rseq_no, rseq_comp). The
// caller serialises access.
type Rx struct {
	size, half uint64 // rbuf bytes; regions are granted half by half
	addr       uint64 // rbuf address and key, for grants
	key        uint32

	tail, head, granted uint64 // stream bytes landed / consumed / granted

	ends             []uint64 // stream offsets where landed messages end (a ring)
	endHead, endTail uint64

	rseq, rseqComp uint16 // data messages consumed / when credit is next due
	rqSize         uint16 // this side's receive depth

	peerSGL SGE // the peer's target SGL (Length: entries)
	peerBE  bool
	slot    uint32 // the peer's entry the next grant goes to
}

// Credit is a credit message to post: an RDMA WRITE WITH IMM with immediate
// (and WR id) Imm. With WithSGE, the SGELen bytes Credit put in its
// argument go to Addr/Key (the peer's target SGL); without, the write is
// zero-length.
type Credit struct {
	Imm     uint32
	WithSGE bool
	Addr    uint64
	Key     uint32
}

// Init sets r up for an rbuf of size bytes (even, at least 2) registered
// at addr/key, rqSize receives kept posted, and a peer that sent peer.
func (r *Rx) Init(size int, addr uint64, key uint32, rqSize uint16, peer ConnData) {
	*r = Rx{
		size:     uint64(size),
		half:     uint64(size) / 2,
		addr:     addr,
		key:      key,
		ends:     make([]uint64, rqSize),
		rqSize:   rqSize,
		rseqComp: rqSize / 2,
		peerSGL:  peer.TargetSGL,
		peerBE:   peer.BigEndianSGL(),
		slot:     1 % peer.TargetSGL.Length,
	}
	r.granted = r.half // the first half goes out in ConnData (FirstRegion)
}

// FirstRegion is the rbuf region announced in this side's ConnData.
func FirstRegion(size int, addr uint64, key uint32) SGE {
	return SGE{Addr: addr, Key: key, Length: uint32(size / 2)}
}

// OnData applies a data message of n bytes that the peer wrote at the next
// position of the rbuf. A message beyond what was granted, or more messages
// than credit allows, is a protocol error.
func (r *Rx) OnData(n uint32) error {
	switch {
	case n == 0:
		return fmt.Errorf("rsocket: empty data message")
	case r.tail+uint64(n) > r.granted:
		return fmt.Errorf("rsocket: data message of %d bytes beyond the %d granted", n, r.granted-r.tail)
	case r.endTail-r.endHead == uint64(len(r.ends)):
		return fmt.Errorf("rsocket: more than %d data messages unread", len(r.ends))
	}
	r.tail += uint64(n)
	r.ends[r.endTail%uint64(len(r.ends))] = r.tail
	r.endTail++
	return nil
}

// Buffered returns the rbuf offset of the next byte to read and how many
// bytes are there to read (they may wrap at the rbuf's end).
func (r *Rx) Buffered() (off, n uint64) { return r.head % r.size, r.tail - r.head }

// Consume marks n buffered bytes as read.
func (r *Rx) Consume(n uint64) {
	r.head += min(n, r.tail-r.head)
	for r.endHead != r.endTail && r.ends[r.endHead%uint64(len(r.ends))] <= r.head {
		r.endHead++
		r.rseq++
	}
}

// CreditDue reports whether a credit message should go out: half the rbuf
// is free to grant, or half the receive depth was consumed since the last.
func (r *Rx) CreditDue() bool {
	return r.size-(r.granted-r.head) >= r.half || int16(r.rseq-r.rseqComp) >= 0
}

// TakeCredit builds the credit message that CreditDue called for, writing
// the granted SGE (if any) into sge (SGELen bytes) in the peer's order.
func (r *Rx) TakeCredit(sge []byte) Credit {
	r.rseqComp = r.rseq + r.rqSize/2
	c := Credit{Imm: Msg(OpSGL, uint32(r.rseq)+uint32(r.rqSize))}
	if r.size-(r.granted-r.head) >= r.half {
		g := SGE{Addr: r.addr + r.granted%r.size, Key: r.key, Length: uint32(r.half)}
		g.Put(sge, r.peerBE)
		c.WithSGE = true
		c.Addr = r.peerSGL.Addr + uint64(r.slot)*SGELen
		c.Key = r.peerSGL.Key
		r.granted += r.half
		if r.slot++; r.slot == r.peerSGL.Length {
			r.slot = 0
		}
	}
	return c
}
