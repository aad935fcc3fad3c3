package zerocopy

import "github.com/rdmanet/rdma/verbs"

// Regs is a connection's registrations of Buffers (B: the root package's
// B) for local access
// (a send's source, a READ's destination): one a Buffer, made on its first
// use on the connection and kept until the Buffer's Free or the
// connection's release. It also holds the Buffers a rendezvous Write or a
// one-sided operation gave up on, in use until the queue pair is gone (the
// device may still move their bytes). The connection's mu guards it; the
// registering itself happens outside (the root package's Conn.regMR).
type Regs[B comparable] struct {
	mrs  map[B]verbs.MR
	held []B
}

// Lookup is b's registration on the connection, or nil.
func (r *Regs[B]) Lookup(b B) verbs.MR { return r.mrs[b] }

// Len is how many Buffers are registered.
func (r *Regs[B]) Len() int { return len(r.mrs) }

// Keep records mr as b's registration, unless a concurrent first use
// recorded one before: it returns the registration to use, and the caller
// deregisters mr when that is not mr.
func (r *Regs[B]) Keep(b B, mr verbs.MR) verbs.MR {
	if old := r.mrs[b]; old != nil {
		return old
	}
	if r.mrs == nil {
		r.mrs = map[B]verbs.MR{}
	}
	r.mrs[b] = mr
	return mr
}

// Drop forgets b's registration and deregisters it; false if there was
// none.
func (r *Regs[B]) Drop(b B) bool {
	mr := r.mrs[b]
	if mr == nil {
		return false
	}
	delete(r.mrs, b)
	mr.Dereg()
	return true
}

// Hold keeps b, which the caller acquired for it, in use until release.
func (r *Regs[B]) Hold(b B) { r.held = append(r.held, b) }

// Release deregisters every registration, calling forget for each Buffer
// first, and returns the Buffers held, for the caller to Release once the
// queue pair is gone. The table is empty afterwards.
func (r *Regs[B]) Release(forget func(B)) (held []B) {
	for b, mr := range r.mrs {
		forget(b)
		mr.Dereg()
	}
	held = r.held
	*r = Regs[B]{}
	return held
}
