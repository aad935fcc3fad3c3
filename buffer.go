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

// noteConn records that c holds a registration of b, for b's Free to end.
func (b *Buffer) noteConn(c *Conn) {
	b.mu.Lock()
	if b.regs == nil {
		b.regs = map[*Conn]struct{}{}
	}
	b.regs[c] = struct{}{}
	b.mu.Unlock()
}

// forgetConn records that c holds no registration of b any more.
func (b *Buffer) forgetConn(c *Conn) {
	b.mu.Lock()
	delete(b.regs, c)
	b.mu.Unlock()
}
