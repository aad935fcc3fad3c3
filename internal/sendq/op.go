package sendq

import (
	"sync"

	"github.com/rdmanet/rdma/verbs"
)

// Op is a one-sided operation (or a memory window's invalidation) waiting
// for its completion: the send queue holds it in its WR's slot and the
// completion fills it in.
type Op struct {
	Done   bool
	Status verbs.WCStatus
}

// ops recycles Ops, so that an operation allocates nothing.
var ops = sync.Pool{New: func() any { return new(Op) }}

// NewOp is an Op not done, from the pool.
func NewOp() *Op {
	r := ops.Get().(*Op)
	*r = Op{}
	return r
}

// Recycle gives r back to the pool, once done: nothing fills it in any
// more.
func (r *Op) Recycle() { ops.Put(r) }
