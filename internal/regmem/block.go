// Package regmem holds a connection's blocks of registered memory: off-heap
// memory (verbs.AllocMemory) and its registration, made and released
// together.
package regmem

import (
	"os"

	"github.com/rdmanet/rdma/verbs"
)

// Block is a ring's, send buffer's or bounce buffer's memory and its
// registration.
type Block struct {
	Mem *verbs.Memory // nil: inside the endpoint's first block
	MR  verbs.MR
	Buf []byte // the ring (its mailbox up to cap) or the send buffer
}

// Release deregisters and frees the block.
func (b *Block) Release() {
	if b.MR != nil {
		b.MR.Dereg()
	}
	Free(b.Mem)
	*b = Block{}
}

// New allocates and registers size bytes, plus extra after them
// (inside the registration, outside buf's length). The bytes start half a
// page into the block, as the first block's ring and send positions do
// (the root package's endpoint.go): a ring or send buffer at a page boundary would put a
// stream's copies (Write into the send buffer, Read out of the ring) at the
// same offset in a page as the caller's page-aligned buffer, where a copy's
// loads and stores alias (64 KiB streams ran 5% slower).
func New(pd verbs.PD, size, extra int, access verbs.Access) (Block, error) {
	half := os.Getpagesize() / 2
	mem, err := verbs.AllocMemory(half + size + extra)
	if err != nil {
		return Block{}, err
	}
	all := mem.Bytes()[half : half+size+extra : half+size+extra]
	mr, err := pd.RegMR(all, access)
	if err != nil {
		mem.Free()
		return Block{}, err
	}
	return Block{Mem: mem, MR: mr, Buf: all[:size]}, nil
}

// Free frees m, if any.
func Free(m *verbs.Memory) {
	if m != nil {
		m.Free()
	}
}
