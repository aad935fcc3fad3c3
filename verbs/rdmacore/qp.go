//go:build cgo && linux

package rdmacore

import (
	"sync"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// postChunk bounds the C arrays of a QP's scratch: longer WR lists are
// posted in chunks of this many.
const postChunk = 64

// queuePair is a verbs.QP created on a CM ID (id), or on a PD without
// the CM (id nil: PD.CreateQP).
type queuePair struct {
	p        qpPtr
	id       *cmid
	num      uint32
	cap      verbs.QPCap
	sendCQ   *cq
	recvCQ   *cq
	sendMu   sync.Mutex // guards send and dead for posting
	send     sendScratch
	sendSlot int // WRs per send chunk
	recvMu   sync.Mutex
	recv     recvScratch
	recvSlot int
	dead     bool // set with both sendMu and recvMu held
	// The binds of the chunk being posted, by index in it (sendMu): taken
	// before the post, since once posted a WR may complete and its
	// caller reuse it before PostSend looks again.
	binds []bindPosted
}

// bindPosted is a bind in a chunk: the window and the rkey it gets.
type bindPosted struct {
	i    int
	w    *memWindow
	rkey uint32
}

var _ verbs.QP = (*queuePair)(nil)

func (q *queuePair) Num() uint32 { return q.num }

// PostSend posts wrs in order. It allocates nothing: each chunk of WRs is
// copied into the QP's C arrays and posted with one ibv_post_send.
func (q *queuePair) PostSend(wrs []verbs.SendWR) error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	return postChunks(wrs, q.sendSlot, q.checkSend, func(base, n int) error {
		q.binds = q.binds[:0]
		for i := 0; i < n; i++ {
			wr := &wrs[base+i]
			setSendWR(q.send, i, wr, i == n-1)
			if wr.Opcode == verbs.OpBindMW {
				q.binds = append(q.binds, bindPosted{i, wr.Bind.MW.(*memWindow), wr.Bind.RKey})
			}
		}
		bad, errno := ibvPostSend(q.p, q.send)
		if errno != 0 && (bad < 0 || bad >= n) {
			bad = 0
		}
		if errno == 0 {
			bad = n
		}
		// The windows of the binds posted carry their new rkeys.
		for _, b := range q.binds {
			if b.i < bad {
				b.w.rkey.Store(b.rkey)
				setMWRKey(b.w.p, b.rkey)
			}
		}
		if errno != 0 {
			return &verbs.PostError{Index: base + bad, Err: &verbs.Error{Op: "ibv_post_send", Errno: errno}}
		}
		return nil
	})
}

// postChunks posts wrs in chunks of at most slots WRs (the QP's C array),
// each with one call of post(base, n) for wrs[base:base+n]. A chunk ends
// early at a WR check refuses: the WRs before it are posted, then the
// refusal is a PostError at its index. post's error ends the run.
func postChunks[WR any](wrs []WR, slots int, check func(*WR) error, post func(base, n int) error) error {
	for base := 0; base < len(wrs); {
		n := 0
		var refused error
		for n < slots && base+n < len(wrs) {
			if err := check(&wrs[base+n]); err != nil {
				refused = err
				break
			}
			n++
		}
		if n > 0 {
			if err := post(base, n); err != nil {
				return err
			}
		}
		if refused != nil {
			return &verbs.PostError{Index: base + n, Err: refused}
		}
		base += n
	}
	return nil
}

// checkSend refuses what does not fit the QP's granted limits before it
// reaches C (the scratch arrays are sized by them).
func (q *queuePair) checkSend(wr *verbs.SendWR) error {
	switch wr.Opcode {
	case verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm, verbs.OpSend, verbs.OpSendWithImm, verbs.OpRDMARead:
	case verbs.OpLocalInv:
		if len(wr.SG) != 0 {
			return verbs.Errorf("ibv_post_send", syscall.EINVAL, "LOCAL_INV takes no SGEs")
		}
	case verbs.OpBindMW:
		return checkBind(wr)
	default:
		return verbs.Errorf("ibv_post_send", syscall.EINVAL, "unsupported opcode %d", wr.Opcode)
	}
	if len(wr.SG) > q.cap.MaxSendSGE {
		return verbs.Errorf("ibv_post_send", syscall.EINVAL, "%d SGEs, the QP allows %d", len(wr.SG), q.cap.MaxSendSGE)
	}
	if wr.Flags&verbs.SendInline != 0 {
		if wr.Opcode == verbs.OpRDMARead {
			return verbs.Errorf("ibv_post_send", syscall.EINVAL, "RDMA_READ cannot be inline")
		}
		total := 0
		for i := range wr.SG {
			total += int(wr.SG[i].Length)
		}
		if total > q.cap.MaxInlineData {
			return verbs.Errorf("ibv_post_send", syscall.EINVAL, "%d inline bytes, the QP allows %d", total, q.cap.MaxInlineData)
		}
	}
	return nil
}

// PostRecv posts receive WRs in order; it allocates nothing.
func (q *queuePair) PostRecv(wrs []verbs.RecvWR) error {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	return postChunks(wrs, q.recvSlot, q.checkRecv, func(base, n int) error {
		for i := 0; i < n; i++ {
			setRecvWR(q.recv, i, &wrs[base+i], i == n-1)
		}
		if bad, errno := ibvPostRecv(q.p, q.recv); errno != 0 {
			if bad < 0 || bad >= n {
				bad = 0
			}
			return &verbs.PostError{Index: base + bad, Err: &verbs.Error{Op: "ibv_post_recv", Errno: errno}}
		}
		return nil
	})
}

// checkRecv refuses a receive WR of more SGEs than the QP was granted.
func (q *queuePair) checkRecv(wr *verbs.RecvWR) error {
	if len(wr.SG) > q.cap.MaxRecvSGE {
		return verbs.Errorf("ibv_post_recv", syscall.EINVAL, "%d SGEs, the QP allows %d", len(wr.SG), q.cap.MaxRecvSGE)
	}
	return nil
}

func (q *queuePair) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil {
		return verbs.Errorf("ibv_modify_qp", syscall.EINVAL, "nil attributes")
	}
	// Held across the call: the kernel refuses to destroy a QP while it is
	// being modified.
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if q.id != nil && mask == verbs.QPAttrState && attr.State == verbs.QPSInit {
		// RESET->INIT needs the port, P_Key index and access flags, which
		// QPAttr does not carry: take the CM's, as rdma_create_qp does.
		if errno := rdmaModifyQPInit(q.id.p, q.p); errno != 0 {
			return &verbs.Error{Op: "ibv_modify_qp", Errno: errno}
		}
		return nil
	}
	if errno := ibvModifyQP(q.p, attr, mask); errno != 0 {
		return &verbs.Error{Op: "ibv_modify_qp", Errno: errno}
	}
	return nil
}

// toError moves the QP to ERR, for a CQ overrun: the CQ and every QP that
// feeds it are unusable then, as on hardware.
func (q *queuePair) toError() {
	q.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState)
}

func (q *queuePair) Query() (verbs.QPAttr, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.dead {
		return verbs.QPAttr{}, verbs.ErrClosed
	}
	a, errno := ibvQueryQP(q.p)
	if errno != 0 {
		return a, &verbs.Error{Op: "ibv_query_qp", Errno: errno}
	}
	return a, nil
}

// Destroy is rdma_destroy_qp; the QP's scratch arrays go with it.
func (q *queuePair) Destroy() error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if q.id != nil {
		if err := q.id.destroyQP(q); err != nil {
			return err
		}
	} else if errno := ibvDestroyQP(q.p); errno != 0 {
		return &verbs.Error{Op: "ibv_destroy_qp", Errno: errno}
	}
	q.dead = true
	freeSendScratch(q.send)
	freeRecvScratch(q.recv)
	q.sendCQ.detach(q)
	q.recvCQ.detach(q)
	return nil
}

// checkBind refuses a bind whose window or region is not this package's
// (the C structs are filled from them), or that carries SGEs.
func checkBind(wr *verbs.SendWR) error {
	b := wr.Bind
	if b == nil || len(wr.SG) != 0 {
		return verbs.Errorf("ibv_post_send", syscall.EINVAL, "BIND_MW needs Bind and no SGEs")
	}
	if _, ok := b.MW.(*memWindow); !ok {
		return verbs.Errorf("ibv_post_send", syscall.EINVAL, "BIND_MW of a window not from this provider")
	}
	if m, ok := b.MR.(*memRegion); !ok || m.p == nil {
		return verbs.Errorf("ibv_post_send", syscall.EINVAL, "BIND_MW to a region not from this provider")
	}
	return nil
}
