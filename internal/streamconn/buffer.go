package streamconn

import (
	"errors"
	"sync"
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// Buffer is the state of one rdma.Buffer (registered memory for zero-copy
// transfers; the public type's doc says what it promises): its memory,
// the transfers using it, whether it was freed or given back to its pool,
// and the connections that hold a registration of it, for Free to end.
// The public Buffer holds one, so that its address is the Buffer's
// identity here too.
type Buffer struct {
	mem *verbs.Memory
	buf []byte

	mu     sync.Mutex
	busy   int                // Writes and Reads using it now
	freed  bool               // Free succeeded: no more uses
	pooled bool               // in a BufferPool's free list: no use until Get
	regs   map[*Conn]struct{} // connections holding a registration of it
}

// BufferError is the error of a Buffer use that cannot go on: its text
// and the errno it matches.
type BufferError struct {
	Msg   string
	Errno syscall.Errno
}

func (e *BufferError) Error() string        { return "rdma: " + e.Msg }
func (e *BufferError) Is(target error) bool { return target == e.Errno }
func (e *BufferError) Unwrap() error        { return e.Errno }

// ErrBufferBusy is Free's and Pool's error while a Write or Read is using
// the Buffer (the public ErrBufferBusy, which the face returns for it).
var ErrBufferBusy = errors.New("rdma: buffer in use by a transfer")

// errBufferFreed is the error of a use after Free (a Write or Read whose
// slice lies in a freed Buffer cannot reach here: its memory is unmapped).
var errBufferFreed = errors.New("rdma: buffer freed")

// errBufferPooled is the error of a use after BufferPool.Put, until Get
// hands the Buffer out again.
var errBufferPooled = errors.New("rdma: buffer given back to its pool")

// buffers maps each live Buffer's memory to it, so that a slice can be
// traced to its Buffer (bufferOf).
var buffers sync.Map // *verbs.Memory -> *Buffer

// Init makes b the Buffer of mem, whose first size bytes it holds, and
// enters it where bufferOf finds it.
func (b *Buffer) Init(mem *verbs.Memory, size int) {
	b.mem, b.buf = mem, mem.Bytes()[:size:size]
	buffers.Store(mem, b)
}

// Bytes is the Buffer's memory.
func (b *Buffer) Bytes() []byte { return b.buf }

// Free ends every exposure of the Buffer on every connection, deregisters
// it from every connection that used it and unmaps it (the public Free's
// doc says when it refuses: ErrBufferBusy, or a registration that still
// covers it). Free twice is a no-op.
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
		c.regs().dropBuffer(b, false)
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

// Pool gives b to a BufferPool's free list: no use can acquire it until
// Unpool, and every exposure of it ends (its registrations for local use
// stay, as a pooled Buffer's should). It fails, changing nothing, for a
// Buffer freed, pooled already or in use (ErrBufferBusy).
func (b *Buffer) Pool() error {
	b.mu.Lock()
	switch {
	case b.freed:
		b.mu.Unlock()
		return errBufferFreed
	case b.pooled:
		b.mu.Unlock()
		return errBufferPooled
	case b.busy > 0:
		b.mu.Unlock()
		return ErrBufferBusy
	}
	b.pooled = true
	b.mu.Unlock()
	b.unexposeAll()
	return nil
}

// Unpool takes b out of its pool's free list: handed out again, or the
// caller's to Free.
func (b *Buffer) Unpool() {
	b.mu.Lock()
	b.pooled = false
	b.mu.Unlock()
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
		c.regs().dropBuffer(b, true)
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

// Memory is the Buffer's memory object (its registrations count on it).
func (b *Buffer) Memory() *verbs.Memory { return b.mem }

// Freed reports whether Free succeeded.
func (b *Buffer) Freed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freed
}

// Holders is the number of connections holding a registration of b.
func (b *Buffer) Holders() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.regs)
}

// Acquire and Release are acquire and release for a caller that stands
// in for a transfer (the public package's tests).
func (b *Buffer) Acquire() error { return b.acquire() }
func (b *Buffer) Release()       { b.release() }
