package soft

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// pd is a protection domain. Its MRs and bound memory windows live in a
// table of slots that the key names (slotOf), so that the data path looks
// a key up with two atomic loads and no lock. The slice is replaced only
// when it grows; a slot changes in place.
//
// Keys. A key's high 24 bits name its slot: (key>>8) modulo the table's
// length, a power of two kept at least twice the number of slots owned,
// so that the live keys' names differ in their low bits and keep
// distinct slots as the table grows. The keys of the PD come from one
// 32-bit counter, started at a random value: each registration (and each
// window) takes the counter's next value whose slot is free, rotated left
// by 8 bits (the counter's low 24 bits are the name). So a key comes back
// only once the counter has gone all the way round, after some two
// billion registrations on the PD at the least (a value is skipped only
// for an owned slot, at most half of them per round of the table): a
// stale rkey (a Desc kept past its Unexpose) reaches no later region, as
// it did after 256 re-registrations of one slot with an 8-bit generation.
// A window's rkey keeps its name for the window's life; its low byte is
// the consumer's (verbs.NextRKey), as on a NIC.
type pd struct {
	ctx   *device
	mu    sync.Mutex // serialises table changes
	mrs   atomic.Pointer[[]atomic.Pointer[mr]]
	names []uint32 // per table slot: slotOwned|name of its owner, 0 if free (mu)
	next  uint32   // the key counter (mu)
	owned int      // slots owned, by MRs and windows (mu)
	nMR   int
	nMW   int
	nQP   atomic.Int64
	dead  bool
}

// slotOwned marks an owned slot in pd.names.
const slotOwned = 1 << 31

// keyOf is the key of counter value c: c rotated left by 8 bits, so that
// its name (key>>8) is c's low 24 bits.
func keyOf(c uint32) uint32 { return c<<8 | c>>24 }

// mr is a registered memory region (lkey == rkey, as on rxe and mlx5), or
// the binding of a memory window (mw.go): a sub-slice of its region with
// remote access only, its own rkey and its own fence, usable by the peer
// of one QP alone. A region's fields do not change once it is in the
// table; a binding's change at each bind of its window, while its fence
// is closed and no copy is inside it (pd.remote reads them inside it).
type mr struct {
	pd     *pd
	buf    []byte
	addr   uint64
	key    uint32
	access verbs.Access
	dead   atomic.Bool
	fence  gate          // every copy the engine makes to or from buf passes it (fence.go)
	unmap  func()        // a dma-buf MR's mapping goes once the fence is closed (dmabuf_linux.go)
	mem    *verbs.Memory // the block a region lies in, pinned until Dereg's fence is closed

	// A region: how many windows are bound to it (pd.mu); Dereg fails
	// while there are any.
	nMW int
	// A window's binding: the QP it was bound on, whose peer alone may
	// use its rkey, and the window (set once, when the binding is made).
	// Both nil for a region; a local key (SGE) never names a binding.
	bound *qp
	win   *mw
}

const validAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessMWBind

func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	const op = "ibv_reg_mr"
	if len(buf) == 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "empty buffer")
	}
	if err := checkMR(op, len(buf), access); err != nil {
		return nil, err
	}
	// The block cannot be freed (verbs.Memory.Free: EBUSY) until Dereg.
	mem := verbs.PinMemory(buf)
	if mem == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "buffer is not registrable memory (use verbs.AllocMemory; Go heap memory cannot be registered)")
	}
	m, err := p.register(op, buf, verbs.AddrOf(buf), access)
	if err != nil {
		mem.Unpin()
		return nil, err
	}
	m.mem = mem
	return m, nil
}

// checkMR checks a registration's length and access flags.
func checkMR(op string, n int, access verbs.Access) error {
	if access&^validAccess != 0 {
		return verbs.Errorf(op, syscall.EINVAL, "unknown access flags %#x", uint32(access&^validAccess))
	}
	if access&verbs.AccessRemoteWrite != 0 && access&verbs.AccessLocalWrite == 0 {
		return verbs.Errorf(op, syscall.EINVAL, "REMOTE_WRITE requires LOCAL_WRITE")
	}
	if uint64(n) > maxMRSize {
		return verbs.Errorf(op, syscall.EINVAL, "length %d above the device's max MR size", n)
	}
	return nil
}

// register adds buf to the MR table (checkMR done); SGEs and remote
// requests name its bytes from addr on.
func (p *pd) register(op string, buf []byte, addr uint64, access verbs.Access) (*mr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil, verbs.ErrClosed
	}
	if p.nMR >= maxMR {
		return nil, verbs.Errorf(op, syscall.ENOMEM, "too many MRs")
	}
	key := p.takeKey()
	m := &mr{pd: p, buf: buf, addr: addr, access: access, key: key}
	p.setSlot(p.slotIndex(key), m)
	p.nMR++
	return m, nil
}

// takeKey takes the key counter's next value whose slot is free (the
// table grown first if that would leave it less than half free), owns
// the slot and returns the key. Called with mu held.
func (p *pd) takeKey() uint32 {
	if p.names == nil {
		p.next = rand.Uint32()
	}
	if 2*(p.owned+1) > len(p.names) {
		p.grow(max(8, 2*len(p.names)))
	}
	mask := uint32(len(p.names) - 1)
	for {
		p.next++
		c := p.next
		if c == 0 || p.names[c&mask] != 0 {
			continue // key 0 is never given; an owned slot is skipped
		}
		p.names[c&mask] = slotOwned | c&0xffffff
		p.owned++
		return keyOf(c)
	}
}

// slotIndex is the table slot key names. Called with mu held.
func (p *pd) slotIndex(key uint32) int { return int(key>>8) & (len(p.names) - 1) }

// freeKey gives key's slot back, its table entry emptied. Called with mu
// held.
func (p *pd) freeKey(key uint32) {
	idx := p.slotIndex(key)
	p.setSlot(idx, nil)
	p.names[idx] = 0
	p.owned--
}

// grow makes the table n slots long (a power of two, at least twice what
// is owned), each owned slot moved to where its name falls now: a new
// slice, the old one left to the lookups that hold it. Called with mu
// held.
func (p *pd) grow(n int) {
	names := make([]uint32, n)
	tbl := make([]atomic.Pointer[mr], n)
	var old []atomic.Pointer[mr]
	if t := p.mrs.Load(); t != nil {
		old = *t
	}
	for i, name := range p.names {
		if name == 0 {
			continue
		}
		j := int(name&0xffffff) & (n - 1)
		names[j] = name
		tbl[j].Store(old[i].Load())
	}
	p.names = names
	p.mrs.Store(&tbl)
}

// setSlot makes slot idx hold m (nil: nothing). Called with mu held.
func (p *pd) setSlot(idx int, m *mr) {
	(*p.mrs.Load())[idx].Store(m)
}

// slotOf is what key's table slot holds (nil: nothing), its key not yet
// compared with key.
func (p *pd) slotOf(key uint32) *mr {
	t := p.mrs.Load()
	if t == nil {
		return nil
	}
	return (*t)[int(key>>8)&(len(*t)-1)].Load()
}

// lookup finds a live MR or window binding by key; nil if none. A
// binding's key changes at each bind, so this is for callers holding mu
// (an invalidation): remote requests go through remote, local keys
// through lookupLocal.
func (p *pd) lookup(key uint32) *mr {
	m := p.slotOf(key)
	if m == nil || m.key != key {
		return nil
	}
	return m
}

// lookupLocal finds a live MR by lkey; a window's rkey names nothing
// locally.
func (p *pd) lookupLocal(key uint32) *mr {
	m := p.slotOf(key)
	if m == nil || m.win != nil || m.key != key {
		return nil
	}
	return m
}

// remote resolves a remote request that q's peer sent: the n bytes at
// addr under key, which must allow need, and the reference to their
// region's or window's fence that every copy to or from them passes.
// false when key names nothing that peer may reach there. No lock: a
// window's binding is read inside its fence, where no bind can change it,
// and the reference holds the generation it was read under, so that a
// copy admitted now is refused once the window is invalidated, even if it
// is bound again meanwhile (fence.go).
func (p *pd) remote(q *qp, key uint32, addr uint64, n uint32, need verbs.Access) ([]byte, gateRef, bool) {
	m := p.slotOf(key)
	if m == nil {
		return nil, gateRef{}, false
	}
	if m.win == nil {
		if m.key != key || m.access&need == 0 {
			return nil, gateRef{}, false
		}
		b, ok := m.slice(addr, n)
		return b, m.fence.ref(), ok
	}
	r, ok := m.fence.admit()
	if !ok {
		return nil, gateRef{}, false // unbound
	}
	var b []byte
	ok = m.key == key && m.access&need != 0 && m.bound == q
	if ok {
		b, ok = m.slice(addr, n)
	}
	r.exit()
	return b, r, ok
}

// slice returns the part of the MR at [addr, addr+n), or nil when out of bounds.
func (m *mr) slice(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], true
}

func (p *pd) Dealloc() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return verbs.ErrClosed
	}
	if p.nMR > 0 || p.nMW > 0 || p.nQP.Load() > 0 {
		return verbs.Errorf("ibv_dealloc_pd", syscall.EBUSY, "%d MRs, %d MWs and %d QPs still use the PD", p.nMR, p.nMW, p.nQP.Load())
	}
	p.dead = true
	p.ctx.objs.Add(-1)
	return nil
}

func (m *mr) Bytes() []byte        { return m.buf }
func (m *mr) Addr() uint64         { return m.addr }
func (m *mr) Len() int             { return len(m.buf) }
func (m *mr) LKey() uint32         { return m.key }
func (m *mr) RKey() uint32         { return m.key }
func (m *mr) Access() verbs.Access { return m.access }

// Dereg removes the region's key from the table, so that no request
// finds it any more, and then closes its fence: it returns once no copy is
// in it, and none starts after. An access a peer is still feeding is cut
// off, not waited for (fence.go). While memory windows are bound to the
// region it fails with EINVAL and changes nothing, as rxe's does (IBA
// 10.6.7.2.6).
func (m *mr) Dereg() error {
	p := m.pd
	p.mu.Lock()
	if m.dead.Load() {
		p.mu.Unlock()
		return verbs.ErrClosed
	}
	if m.nMW > 0 {
		n := m.nMW
		p.mu.Unlock()
		return verbs.Errorf("ibv_dereg_mr", syscall.EINVAL, "%d memory windows are bound to the MR", n)
	}
	m.dead.Store(true)
	p.freeKey(m.key)
	p.nMR--
	p.mu.Unlock()
	m.fence.close()
	if m.unmap != nil {
		m.unmap()
	}
	if m.mem != nil {
		m.mem.Unpin() // no copy touches the block any more
	}
	return nil
}
