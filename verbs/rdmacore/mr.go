//go:build cgo && linux

package rdmacore

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/rdmanet/rdma/verbs"
)

// protDomain is a verbs.PD.
type protDomain struct {
	p   pdPtr
	ctx ctxPtr
	mu  sync.Mutex
	// dead is set once Dealloc succeeded.
	dead bool
}

var _ verbs.PD = (*protDomain)(nil)

// RegMR registers buf, which must lie inside memory from verbs.AllocMemory:
// the device reads and writes it at any time, so it must never be Go heap
// memory that the garbage collector could free.
func (pd *protDomain) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, verbs.Errorf("ibv_reg_mr", syscall.EINVAL, "empty buffer")
	}
	if access&verbs.AccessRemoteWrite != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, verbs.Errorf("ibv_reg_mr", syscall.EINVAL, "REMOTE_WRITE requires LOCAL_WRITE")
	}
	// The block cannot be freed (verbs.Memory.Free: EBUSY) until Dereg.
	mem := verbs.PinMemory(buf)
	if mem == nil {
		return nil, verbs.Errorf("ibv_reg_mr", syscall.EINVAL,
			"buffer is not inside memory from verbs.AllocMemory (Go heap memory cannot be registered)")
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		mem.Unpin()
		return nil, verbs.ErrClosed
	}
	p, lkey, rkey, errno := ibvRegMR(pd.p, unsafe.Pointer(unsafe.SliceData(buf)), len(buf), access)
	if errno != 0 {
		mem.Unpin()
		return nil, &verbs.Error{Op: "ibv_reg_mr", Errno: errno}
	}
	return &memRegion{p: p, buf: buf, mem: mem, lkey: lkey, rkey: rkey, access: access}, nil
}

// CreateQP is ibv_create_qp: an RC QP in RESET, outside the CM, which its
// owner moves to RTS with Modify (the kernel checks each transition's
// attributes: verbs.RCTransition).
func (pd *protDomain) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	const op = "ibv_create_qp"
	if attr == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "nil attributes")
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "send and receive CQs must be rdmacore CQs")
	}
	c := attr.Cap
	if c.MaxSendWR < 1 || c.MaxRecvWR < 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "capabilities %+v out of range", c)
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return nil, verbs.ErrClosed
	}
	p, errno := ibvCreateQP(pd.p, scq.p, rcq.p, &c, attr.SignalAll)
	if errno != 0 {
		return nil, &verbs.Error{Op: op, Errno: errno}
	}
	q := &queuePair{p: p, num: qpNum(p), cap: c, sendCQ: scq, recvCQ: rcq}
	q.sendSlot = max(min(c.MaxSendWR, postChunk), 1)
	q.recvSlot = max(min(c.MaxRecvWR, postChunk), 1)
	q.send = allocSendScratch(q.sendSlot, max(c.MaxSendSGE, 1))
	q.recv = allocRecvScratch(q.recvSlot, max(c.MaxRecvSGE, 1))
	if q.send == nil || q.recv == nil {
		freeSendScratch(q.send)
		freeRecvScratch(q.recv)
		ibvDestroyQP(p)
		return nil, verbs.Errorf(op, syscall.ENOMEM, "allocating the posting arrays")
	}
	scq.attach(q)
	rcq.attach(q)
	return q, nil
}

// RegDmaBufMR is ibv_reg_dmabuf_mr (libibverbs 1.12, rdma-core 34): the
// device reaches the dma-buf's memory itself, so the MR has no Bytes. A
// device whose driver (or kernel) cannot register dma-bufs says so with
// EOPNOTSUPP: rxe is one.
func (pd *protDomain) RegDmaBufMR(offset uint64, length int, iova uint64, fd int, access verbs.Access) (verbs.MR, error) {
	const op = "ibv_reg_dmabuf_mr"
	if length <= 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "length %d", length)
	}
	if access&verbs.AccessRemoteWrite != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "REMOTE_WRITE requires LOCAL_WRITE")
	}
	name := ibvDeviceName(pd.ctx)
	if why := missing["ibv_reg_dmabuf_mr"]; why != "" {
		return nil, verbs.Errorf(op, syscall.EOPNOTSUPP, "%s: this libibverbs cannot register dma-bufs (%s; rdma-core 34 or later can)", name, why)
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return nil, verbs.ErrClosed
	}
	p, lkey, rkey, errno := ibvRegDmaBufMR(pd.p, offset, length, iova, fd, access)
	switch errno {
	case 0:
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPROTONOSUPPORT:
		return nil, verbs.Errorf(op, errno, "%s cannot register dma-bufs: its driver or the kernel has no dma-buf support (rxe has none; mlx5 and other NICs with on-demand paging do)", name)
	default:
		return nil, verbs.Errorf(op, errno, "%s: dma-buf descriptor %d, bytes %d..%d", name, fd, offset, offset+uint64(length))
	}
	return &memRegion{p: p, iova: iova, n: length, lkey: lkey, rkey: rkey, access: access}, nil
}

// Dealloc is ibv_dealloc_pd; the kernel refuses (EBUSY) while MRs or QPs use it.
func (pd *protDomain) Dealloc() error {
	return freeOnce(&pd.mu, &pd.dead, "ibv_dealloc_pd", func() syscall.Errno { return ibvDeallocPD(pd.p) })
}

// freeOnce calls free, the verb (named op) that frees a PD or an MR, with
// mu held, unless dead says it has succeeded before; it sets dead when free
// succeeds.
func freeOnce(mu *sync.Mutex, dead *bool, op string, free func() syscall.Errno) error {
	mu.Lock()
	defer mu.Unlock()
	if *dead {
		return verbs.ErrClosed
	}
	if errno := free(); errno != 0 {
		return &verbs.Error{Op: op, Errno: errno}
	}
	*dead = true
	return nil
}

// memRegion is a verbs.MR.
type memRegion struct {
	p          mrPtr
	buf        []byte // nil for a dma-buf's, which the CPU has no view of here
	iova       uint64 // a dma-buf's: its first byte's address, and its length
	n          int
	lkey, rkey uint32
	access     verbs.Access
	mem        *verbs.Memory // the block buf lies in, pinned until Dereg
	mu         sync.Mutex
	dead       bool
}

var _ verbs.MR = (*memRegion)(nil)

func (m *memRegion) Bytes() []byte { return m.buf }

func (m *memRegion) Addr() uint64 {
	if m.buf == nil {
		return m.iova
	}
	return verbs.AddrOf(m.buf)
}

func (m *memRegion) Len() int {
	if m.buf == nil {
		return m.n
	}
	return len(m.buf)
}

func (m *memRegion) LKey() uint32         { return m.lkey }
func (m *memRegion) RKey() uint32         { return m.rkey }
func (m *memRegion) Access() verbs.Access { return m.access }

func (m *memRegion) Dereg() error {
	err := freeOnce(&m.mu, &m.dead, "ibv_dereg_mr", func() syscall.Errno { return ibvDeregMR(m.p) })
	if err == nil && m.mem != nil {
		m.mem.Unpin() // the device reaches the block no more
	}
	return err
}

// AllocMW is ibv_alloc_mw of a type 2 window.
func (pd *protDomain) AllocMW() (verbs.MW, error) {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return nil, verbs.ErrClosed
	}
	p, rkey, errno := ibvAllocMW(pd.p)
	if errno != 0 {
		return nil, &verbs.Error{Op: "ibv_alloc_mw", Errno: errno}
	}
	w := &memWindow{p: p}
	w.rkey.Store(rkey)
	return w, nil
}

// memWindow is a verbs.MW.
type memWindow struct {
	p    mwPtr
	rkey atomic.Uint32 // set by PostSend as it posts a bind
	mu   sync.Mutex
	dead bool
}

var _ verbs.MW = (*memWindow)(nil)

func (w *memWindow) RKey() uint32 { return w.rkey.Load() }

func (w *memWindow) Dealloc() error {
	return freeOnce(&w.mu, &w.dead, "ibv_dealloc_mw", func() syscall.Errno { return ibvDeallocMW(w.p) })
}
