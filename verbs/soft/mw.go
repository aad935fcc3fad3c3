package soft

import (
	"sync/atomic"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// Type 2 memory windows, as rxe keeps them (drivers/infiniband/sw/rxe/rxe_mw.c).
//
// A window owns one slot of its PD's key table for its life, and its rkey
// is the slot's name (memory.go) <<8 | a low byte: the one alloc gave it,
// then the one each bind names (the consumer's, verbs.NextRKey). While unbound the slot holds
// nothing. A bind puts the window's binding there: an mr whose buf is the
// bound range of the region, with the bind's rkey and remote access, its
// own fence, and the QP it was bound on. A remote READ or WRITE then finds
// it by the same table lookup as a region's rkey (pd.remote), and takes it
// only on that QP; local keys never name a binding (pd.lookupLocal).
//
// Unbinding (an invalidation, Dealloc) empties the slot and closes the
// binding's fence, which returns once no copy through the window is in
// progress, and none can start (fence.go): that is done before the
// invalidation's completion is queued, and before Dealloc returns.
//
// The window keeps one binding, made at alloc, and a bind fills it in
// again, so that a bind and an invalidation allocate nothing. What keeps
// an access admitted under an earlier bind out is the fence's generation:
// a bind opens the binding's fence under a new one, and a copy enters only
// under the generation its request was admitted under (pd.remote). A READ
// response queued before an invalidation thus moves nothing after it,
// even once the window is bound again, to another range or region. A bind
// changes the binding's fields only while its fence is closed and empty
// (remote reads them inside it); once the fence's generations run out the
// window takes a new binding, and the old one stays closed for whoever
// still holds it.
//
// Bind and invalidate execute when they are posted (qp.go's postLocal),
// which is never later than a NIC executes them in send queue order: a WR
// posted after a bind finds the window bound. They complete in order
// behind the WRs posted before them.

// mw is a type 2 memory window.
type mw struct {
	pd   *pd
	rkey atomic.Uint32 // the latest bind's, or alloc's; its name (rkey>>8) owns a table slot until Dealloc

	// Under pd.mu.
	b      *mr  // the binding, reused by each bind; its fence closed while unbound
	bound  bool // b is in the table
	parent *mr  // the region b lies in, while bound
	dead   bool
}

// maxMW is the number of windows a PD may hold, as many as MRs.
const maxMW = maxMR

// AllocMW is ibv_alloc_mw(IBV_MW_TYPE_2): a window, unbound, with a slot
// of the PD's key table and a first rkey in it.
func (p *pd) AllocMW() (verbs.MW, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil, verbs.ErrClosed
	}
	if p.nMW >= maxMW {
		return nil, verbs.Errorf("ibv_alloc_mw", syscall.ENOMEM, "too many MWs")
	}
	w := &mw{pd: p}
	w.b = newBinding(w)
	w.rkey.Store(p.takeKey())
	p.nMW++
	return w, nil
}

func (w *mw) RKey() uint32 { return w.rkey.Load() }

// Dealloc revokes the window if it is bound (its fence closed: nothing
// more moves through it once Dealloc returns) and frees its slot.
func (w *mw) Dealloc() error {
	p := w.pd
	p.mu.Lock()
	if w.dead {
		p.mu.Unlock()
		return verbs.ErrClosed
	}
	w.dead = true
	b := w.unbind()
	p.freeKey(w.rkey.Load())
	p.nMW--
	p.mu.Unlock()
	if b != nil {
		b.fence.close()
	}
	return nil
}

// newBinding is an unbound binding of w, its fence closed.
func newBinding(w *mw) *mr {
	b := &mr{pd: w.pd, win: w}
	b.fence.state.Store(gateClosed)
	return b
}

// unbind empties the window's slot, shuts the binding's fence and returns
// the binding (nil if the window was not bound), whose fence the caller
// closes (waits out the copies inside) once pd.mu is released. It is shut
// here, under pd.mu, so that a bind that follows finds it shut. Called
// with pd.mu held.
func (w *mw) unbind() *mr {
	if !w.bound {
		return nil
	}
	w.pd.setSlot(w.pd.slotIndex(w.rkey.Load()), nil)
	w.b.fence.shut()
	w.parent.nMW--
	w.bound, w.parent = false, nil
	return w.b
}

// mwAccess is the access a window may grant.
const mwAccess = verbs.AccessRemoteRead | verbs.AccessRemoteWrite

// bind executes a bind WR posted on q: WCSuccess, or WCMWBindErr for a
// bind a NIC refuses (rxe_check_bind_mw's rules). Called with q.mu held.
func (q *qp) bind(w *mw, parent *mr, b *verbs.MWBind) verbs.WCStatus {
	p := q.pd
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case w.dead || w.pd != p: // C10-72: the window's PD is the QP's
		return verbs.WCMWBindErr
	case w.bound: // o10-37.2.30: a type 2 window binds only while free
		return verbs.WCMWBindErr
	case b.Length == 0: // o10-37.2.40: not a way to unbind a type 2 window
		return verbs.WCMWBindErr
	case b.RKey>>8 != w.rkey.Load()>>8: // the consumer owns the low byte only
		return verbs.WCMWBindErr
	case parent.dead.Load() || parent.pd != p || parent.win != nil:
		return verbs.WCMWBindErr
	case parent.access&verbs.AccessMWBind == 0: // C10-73
		return verbs.WCMWBindErr
	case b.Access&^mwAccess != 0:
		return verbs.WCMWBindErr
	case b.Access&verbs.AccessRemoteWrite != 0 && parent.access&verbs.AccessLocalWrite == 0: // C10-74
		return verbs.WCMWBindErr
	}
	// C10-75: the range lies inside the region.
	if b.Addr < parent.addr || b.Addr-parent.addr > uint64(len(parent.buf)) ||
		b.Length > uint64(len(parent.buf))-(b.Addr-parent.addr) {
		return verbs.WCMWBindErr
	}
	off := b.Addr - parent.addr
	m := w.b
	if !m.fence.reopenable() {
		m = newBinding(w)
		w.b = m
	}
	// The invalidation that closed the fence may still be waiting out a
	// copy (postLocal closes it once pd.mu is released, and the window
	// may be bound again on another QP meanwhile): the fields change only
	// once nothing is inside.
	m.fence.drain()
	m.buf = parent.buf[off : off+b.Length : off+b.Length]
	m.addr, m.key, m.access, m.bound = b.Addr, b.RKey, b.Access, q
	m.fence.reopen()
	p.setSlot(p.slotIndex(b.RKey), m)
	w.bound, w.parent = true, parent
	parent.nMW++
	w.rkey.Store(b.RKey)
	return verbs.WCSuccess
}

// invalidate executes a local invalidation posted on q: the window bound
// on q under rkey is unbound, and the binding returned for the caller to
// close its fence. WCLocQPOpErr (rxe's status) when rkey names no window
// bound on q. Called with q.mu held.
func (q *qp) invalidate(rkey uint32) (*mr, verbs.WCStatus) {
	p := q.pd
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.lookup(rkey)
	if m == nil || m.win == nil || m.bound != q {
		return nil, verbs.WCLocQPOpErr
	}
	return m.win.unbind(), verbs.WCSuccess
}
