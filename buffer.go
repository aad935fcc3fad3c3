package rdma

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// Buffer is registered memory for zero-copy transfers: Write and Read of
// slices inside its Bytes take the paths that do not copy (see
// docs/design.md, "When a Write copies"). It is allocated outside the Go
// heap (verbs.AllocMemory: private anonymous memory, never moved or reused
// by the garbage collector) and usable with every Conn on every provider:
// it is registered with a connection's protection domain the first time it
// is used there, and that registration, for local access only, is kept
// until Free or the connection's Close. What a peer may READ of it during
// a rendezvous is registered separately, for that transfer only, and
// revoked before the Write returns.
//
// A Buffer is safe for concurrent use by several connections; its bytes
// are the caller's to synchronise, as any memory's. Free it when done:
// the memory is not garbage collected.
type Buffer struct {
	mem *verbs.Memory
	buf []byte

	mu     sync.Mutex
	busy   int                // Writes and Reads using it now
	freed  bool               // Free succeeded: no more uses
	pooled bool               // in a BufferPool's free list: no use until Get
	regs   map[*Conn]struct{} // connections holding a registration of it
}

// ErrBufferBusy is Free's error while a Write or Read is using the
// Buffer: nothing was freed (the caller frees it once they returned).
var ErrBufferBusy = &bufferError{"buffer in use by a transfer", syscall.EBUSY}

// errBufferFreed is the error of a use after Free (a Write or Read whose
// slice lies in a freed Buffer cannot reach here: its memory is unmapped).
var errBufferFreed = errors.New("rdma: buffer freed")

// errBufferPooled is the error of a use after BufferPool.Put, until Get
// hands the Buffer out again.
var errBufferPooled = errors.New("rdma: buffer given back to its pool")

type bufferError struct {
	msg   string
	errno syscall.Errno
}

func (e *bufferError) Error() string        { return "rdma: " + e.msg }
func (e *bufferError) Is(target error) bool { return target == e.errno }
func (e *bufferError) Unwrap() error        { return e.errno }

// buffers maps each live Buffer's memory to it, so that a slice can be
// traced to its Buffer (bufferOf).
var buffers sync.Map // *verbs.Memory -> *Buffer

// AllocBuffer allocates size bytes of registrable memory (rounded up to
// whole pages; Bytes has exactly size bytes), zeroed.
func AllocBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("rdma: buffer size %d must be positive", size)
	}
	mem, err := verbs.AllocMemory(size)
	if err != nil {
		return nil, err
	}
	b := &Buffer{mem: mem, buf: mem.Bytes()[:size:size]}
	buffers.Store(mem, b)
	return b, nil
}

// Bytes is the Buffer's memory. It stays valid until Free; using it
// afterwards faults.
func (b *Buffer) Bytes() []byte { return b.buf }

// Free ends every exposure of the Buffer (Conn.Expose) on every
// connection, deregisters it from every connection that used it and
// unmaps it: once Free returns, no peer's access touches the memory, even
// one under way (the dereg fence). While a Write or Read is using it, Free
// fails with ErrBufferBusy (errors.Is(err, syscall.EBUSY)) and changes
// nothing, exposures included: a transfer in progress is never cut short
// and its bytes never land in memory that has gone. So it does after a
// Write from it gave up mid-way (its deadline or a failure), until that
// connection is closed. Free never unmaps memory that a registration
// still covers, whatever runs beside it (a Close, an Unexpose, a Put):
// verbs.Memory.Free refuses that too (EBUSY, and then Free changes
// nothing). Free twice is a no-op.
func (b *Buffer) Free() error {
	b.mu.Lock()
	if b.freed {
		b.mu.Unlock()
		return nil
	}
	if b.busy > 0 {
		b.mu.Unlock()
		return ErrBufferBusy
	}
	if b.pooled {
		// Its pool's now, which may hand it out again: not the caller's
		// to unmap.
		b.mu.Unlock()
		return errBufferPooled
	}
	b.freed = true
	regs := b.regs
	b.regs = nil
	b.mu.Unlock()
	for c := range regs {
		c.dropBuffer(b, false)
	}
	buffers.Delete(b.mem)
	if err := b.mem.Free(); err != nil {
		// A registration still covers it (which the above rules out):
		// it stays the caller's, to Free again.
		buffers.Store(b.mem, b)
		b.mu.Lock()
		b.freed = false
		b.mu.Unlock()
		return err
	}
	return nil
}

// bufferOf returns the Buffer that holds all of p, or nil.
func bufferOf(p []byte) *Buffer {
	m, _ := verbs.MemoryOf(p)
	if m == nil {
		return nil
	}
	if b, ok := buffers.Load(m); ok {
		return b.(*Buffer)
	}
	return nil
}

// acquire marks the Buffer in use by a transfer, unless it was freed or
// given back to its pool.
func (b *Buffer) acquire() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.freed:
		return errBufferFreed
	case b.pooled:
		return errBufferPooled
	}
	b.busy++
	return nil
}

// unexposeAll ends every exposure of b, which is pooled (no use can
// acquire it), on every connection: BufferPool.Put's revocation. Its
// registrations for local use stay, as a pooled Buffer's should.
func (b *Buffer) unexposeAll() {
	var few [8]*Conn // no allocation for a Buffer of a few connections
	b.mu.Lock()
	conns := few[:0]
	for c := range b.regs {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.dropBuffer(b, true)
	}
}

// release ends a transfer's use.
func (b *Buffer) release() {
	b.mu.Lock()
	b.busy--
	b.mu.Unlock()
}

// bufferMR is the connection's registration of b (which the caller
// acquired), made on the first use: local access only (a send's source,
// a READ's destination), never remote. Called with neither mu held.
func (c *Conn) bufferMR(b *Buffer) (verbs.MR, error) {
	c.mu.Lock()
	zc := c.zeroCopyLocked()
	mr := zc.bufMRs[b]
	c.mu.Unlock()
	if mr != nil {
		return mr, nil
	}
	// Registration pins memory on a NIC and can take a while: not under
	// mu. Concurrent first uses (a Read, a Write, one-sided operations)
	// share the registration made first.
	// Where the device has memory windows, a rendezvous Write binds one
	// to the bytes it exposes, in this registration (rndvwindow.go).
	access := verbs.AccessLocalWrite
	c.mu.Lock()
	if c.windowsLocked(c.zeroCopyLocked()) {
		access |= verbs.AccessMWBind
	}
	c.mu.Unlock()
	return c.regMR(b, b.buf, access, func(zc *zeroCopy, mr verbs.MR) verbs.MR {
		if old := zc.bufMRs[b]; old != nil {
			return old
		}
		if zc.bufMRs == nil {
			zc.bufMRs = map[*Buffer]verbs.MR{}
		}
		zc.bufMRs[b] = mr
		return mr
	})
}

// dropBuffer ends b's exposures on the connection and, unless
// exposuresOnly (BufferPool.Put), deregisters b from it (Buffer.Free),
// unless its Close already did. Under mu, as Close's release does all of
// this under mu too: whichever comes second finds every registration of
// b on the connection gone once the first returns, so that neither Free
// nor Put goes on while an MR of the connection still covers b.
func (c *Conn) dropBuffer(b *Buffer, exposuresOnly bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.zc == nil {
		return
	}
	if mr := c.zc.bufMRs[b]; mr != nil && !exposuresOnly {
		delete(c.zc.bufMRs, b)
		mr.Dereg()
	}
	// Its exposures end too: the dereg fence makes sure no access of the
	// peer's touches the memory once Dereg returns, before Free unmaps it.
	for id, e := range c.zc.exposed {
		if e.buf == b {
			delete(c.zc.exposed, id)
			e.mr.Dereg()
		}
	}
	c.forgetIfUnusedLocked(b)
}

// forgetIfUnusedLocked drops the connection from b's registrations once it
// holds none of b (no registration for local use, no exposure), so that a
// Buffer put back and reused for many connections keeps none of the old
// ones. Called with mu held.
func (c *Conn) forgetIfUnusedLocked(b *Buffer) {
	if c.zc.bufMRs[b] != nil {
		return
	}
	for _, e := range c.zc.exposed {
		if e.buf == b {
			return
		}
	}
	b.mu.Lock()
	delete(b.regs, c)
	b.mu.Unlock()
}

// zeroCopy is the state of a connection that used Buffers or rendezvous:
// most connections never do, and pay a pointer for it.
type zeroCopy struct {
	bufMRs map[*Buffer]verbs.MR // the Buffers registered on the connection (mu)
	ctlMR  verbs.MR             // the descriptor staging's registration (rndv.go; the writer's)
	// The rendezvous reader's bounce buffer and its unread bytes (the
	// reader's, under rmu).
	bounce                 block
	bounceHead, bounceTail int
	// Buffers a rendezvous Write or a one-sided operation gave up on,
	// held in use until the queue pair is destroyed (holdUntilTeardown).
	held []*Buffer
	// The ranges of Buffers exposed to the peer (remote.go), by the
	// number their Desc carries, and the last number given (mu).
	exposed      map[uint32]exposure
	lastExposure uint32
	// The rendezvous' memory window (rndvwindow.go): whether the device
	// has windows (0 not asked yet, 1 yes, -1 no; mu), the window (mu),
	// its last rkey and the bind's argument (the writer's, under wmu).
	windows int8
	mw      verbs.MW
	mwKey   uint32
	mwBind  verbs.MWBind
}

// zeroCopyLocked is the connection's zeroCopy, made on the first use.
func (c *Conn) zeroCopyLocked() *zeroCopy {
	if c.zc == nil {
		c.zc = new(zeroCopy)
	}
	return c.zc
}

// zeroCopy is zeroCopyLocked for a caller without mu.
func (c *Conn) zeroCopy() *zeroCopy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zeroCopyLocked()
}

// releaseZeroCopy deregisters every Buffer registered on the connection
// and releases the rendezvous' memory, before the protection domain goes
// (releaseVerbs); it returns the Buffers held until the queue pair is
// gone, for the caller to release then.
//
// The Buffers' registrations and exposures go under mu, before c.zc is
// cleared: a Buffer's Free (or a Put) that runs beside finds them either
// still there, and ends them itself (dropBuffer, under mu), or already
// gone, never half way, so it cannot unmap a Buffer that an MR of this
// connection still covers. Each Dereg waits only for memory copies in
// progress (the dereg fence), never on the peer.
func (c *Conn) releaseZeroCopy() (held []*Buffer) {
	c.mu.Lock()
	zc := c.zc
	if zc == nil {
		c.mu.Unlock()
		return nil
	}
	if zc.mw != nil {
		zc.mw.Dealloc() // before the registrations it may be bound in
	}
	for _, e := range zc.exposed {
		e.mr.Dereg()
	}
	for b, mr := range zc.bufMRs {
		b.mu.Lock()
		delete(b.regs, c)
		b.mu.Unlock()
		mr.Dereg()
	}
	for _, e := range zc.exposed {
		b := e.buf
		b.mu.Lock()
		delete(b.regs, c)
		b.mu.Unlock()
	}
	c.zc = nil
	c.mu.Unlock()
	zc.bounce.release()
	if zc.ctlMR != nil {
		zc.ctlMR.Dereg()
	}
	return zc.held
}
