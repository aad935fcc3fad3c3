package rdma

import (
	"fmt"
	"syscall"

	"github.com/rdmanet/rdma/internal/streamconn"
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
	b streamconn.Buffer // its state (internal/streamconn), which connections register
}

// ErrBufferBusy is Free's error while a Write or Read is using the
// Buffer: nothing was freed (the caller frees it once they returned).
var ErrBufferBusy = &bufferError{"buffer in use by a transfer", syscall.EBUSY}

type bufferError struct {
	msg   string
	errno syscall.Errno
}

func (e *bufferError) Error() string        { return "rdma: " + e.msg }
func (e *bufferError) Is(target error) bool { return target == e.errno }
func (e *bufferError) Unwrap() error        { return e.errno }

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
	b := new(Buffer)
	b.b.Init(mem, size)
	return b, nil
}

// Bytes is the Buffer's memory. It stays valid until Free; using it
// afterwards faults.
func (b *Buffer) Bytes() []byte { return b.b.Bytes() }

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
func (b *Buffer) Free() error { return bufferErr(b.b.Free()) }

// bufferErr is err as the public package names it (ErrBufferBusy).
func bufferErr(err error) error {
	if err == streamconn.ErrBufferBusy {
		return ErrBufferBusy
	}
	return err
}

// engine is b's state, or nil for no Buffer.
func (b *Buffer) engine() *streamconn.Buffer {
	if b == nil {
		return nil
	}
	return &b.b
}
