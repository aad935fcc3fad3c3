package rsocket

import "fmt"

// Tx is the sending side of one connection: message credits (sseq_no,
// sseq_comp), the regions of the peer's rbuf granted through this side's
// target SGL, send queue slots for data and for control messages, and the
// send buffer ring that data is staged in. The caller serialises access.
type Tx struct {
	seq, limit uint16 // data messages sent; more may go while seq != limit
	credits    uint16 // the peer's receive depth: limit-seq never exceeds it

	sgl  [SGLSize]SGE // granted regions, used in order from cur
	cur  int
	next int // the entry the peer writes next (it wrote entry 0 through ConnData)

	sqeAvail, sqeMax int    // data WRs that may be posted / in all
	ctrlSeq, ctrlMax uint32 // control messages posted / allowed so far

	sbufSize       uint64
	sbHead, sbTail uint64 // send buffer bytes completed / staged
}

// Data is one data message the caller is to stage and post: copy N bytes to
// send buffer offset Off (wrapping at the buffer's end), then post an RDMA
// WRITE WITH IMM of them to Addr/Key with immediate Imm and WR id Imm.
type Data struct {
	Off  uint64
	N    uint32
	Addr uint64
	Key  uint32
	Imm  uint32
}

// Init sets t up for a peer that sent peer, with a send queue of sqSize WRs
// (CtrlSlots of them kept for control messages) and a send buffer of
// sbufSize bytes.
func (t *Tx) Init(peer ConnData, sqSize, sbufSize int) {
	*t = Tx{
		limit:    peer.Credits,
		credits:  peer.Credits,
		next:     1 % SGLSize,
		sqeAvail: sqSize - CtrlSlots,
		sqeMax:   sqSize - CtrlSlots,
		ctrlMax:  CtrlSlots,
		sbufSize: uint64(sbufSize),
	}
	t.sgl[0] = peer.DataBuf
}

// NextData reserves the next data message of at most want bytes (want >
// 0). ok is false when a credit, a granted region, a send queue slot or
// send buffer space is missing; completions and credit updates bring them.
func (t *Tx) NextData(want int) (d Data, ok bool) {
	r := &t.sgl[t.cur]
	if t.sqeAvail == 0 || t.seq == t.limit || r.Length == 0 || want <= 0 {
		return d, false
	}
	free := t.sbufSize - (t.sbTail - t.sbHead)
	if free < uint64(min(want, SendLowWater)) {
		return d, false
	}
	n := uint32(min(uint64(want), MaxTransfer, uint64(r.Length), free))
	d = Data{Off: t.sbTail % t.sbufSize, N: n, Addr: r.Addr, Key: r.Key, Imm: Msg(OpData, n)}
	t.seq++
	t.sqeAvail--
	t.sbTail += uint64(n)
	r.Addr += uint64(n)
	r.Length -= n
	if r.Length == 0 {
		t.cur = (t.cur + 1) % SGLSize
	}
	return d, true
}

// CanSend reports whether NextData(want) would succeed.
func (t *Tx) CanSend(want int) bool {
	free := t.sbufSize - (t.sbTail - t.sbHead)
	return t.sqeAvail > 0 && t.seq != t.limit && t.sgl[t.cur].Length > 0 && want > 0 &&
		free >= uint64(min(want, SendLowWater))
}

// CtrlAvail reports whether a credit or control message may be posted.
func (t *Tx) CtrlAvail() bool { return t.ctrlSeq != t.ctrlMax }

// TakeCtrl claims a control slot; the result (0..CtrlSlots-1) names a
// staging area for the message's payload that stays untouched until the
// message completes.
func (t *Tx) TakeCtrl() int {
	s := int(t.ctrlSeq & (CtrlSlots - 1))
	t.ctrlSeq++
	return s
}

// AllDone reports whether every posted message has completed.
func (t *Tx) AllDone() bool {
	return t.ctrlMax-t.ctrlSeq == CtrlSlots && t.sqeAvail == t.sqeMax
}

// Completed applies the successful or flushed completion of the send whose
// WR id is wrid (the message's immediate: OpData with its length, OpSGL, or
// OpCtrl with its code, keepalives included).
func (t *Tx) Completed(wrid uint64) error {
	msg := uint32(wrid)
	if wrid>>32 != 0 {
		return fmt.Errorf("rsocket: completion of unknown send %#x", wrid)
	}
	switch MsgOp(msg) {
	case OpData:
		n := uint64(MsgData(msg))
		if t.sqeAvail == t.sqeMax || n > t.sbTail-t.sbHead {
			return fmt.Errorf("rsocket: completion of a data send that is not outstanding")
		}
		t.sqeAvail++
		t.sbHead += n
	case OpSGL, OpCtrl:
		if t.ctrlMax == t.ctrlSeq+CtrlSlots {
			return fmt.Errorf("rsocket: completion of a control send that is not outstanding")
		}
		t.ctrlMax++
	default:
		return fmt.Errorf("rsocket: completion of unknown send %#x", wrid)
	}
	return nil
}

// NextSlot is the entry of this side's target SGL that the peer's next
// region grant lands in.
func (t *Tx) NextSlot() int { return t.next }

// OnCredit applies a credit message (OpSGL) from the peer: data is its
// immediate's data field and entry the SGE it wrote into NextSlot, or nil
// when the message carried none.
func (t *Tx) OnCredit(data uint32, entry *SGE) error {
	limit := uint16(data)
	if d := limit - t.seq; d > t.credits {
		return fmt.Errorf("rsocket: credit to message %d with %d sent exceeds the peer's %d receives", limit, t.seq, t.credits)
	}
	if int16(limit-t.limit) < 0 {
		return fmt.Errorf("rsocket: credit went back from %d to %d", t.limit, limit)
	}
	if entry != nil {
		s := &t.sgl[t.next]
		if s.Length != 0 {
			return fmt.Errorf("rsocket: region granted into target SGL entry %d while it is in use", t.next)
		}
		if entry.Length == 0 || entry.Length > MaxBuf || entry.Addr+uint64(entry.Length) < entry.Addr {
			return fmt.Errorf("rsocket: bad region granted: %d bytes at %#x", entry.Length, entry.Addr)
		}
		*s = *entry
		t.next = (t.next + 1) % SGLSize
	}
	t.limit = limit
	return nil
}

// Buffered returns the bytes staged in the send buffer and not yet
// completed.
func (t *Tx) Buffered() uint64 { return t.sbTail - t.sbHead }
