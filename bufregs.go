package rdma

import "github.com/rdmanet/rdma/verbs"

// bufferRegs is a connection's registrations of Buffers for local access
// (a send's source, a READ's destination): one a Buffer, made on its first
// use on the connection and kept until the Buffer's Free or the
// connection's release. It also holds the Buffers a rendezvous Write or a
// one-sided operation gave up on, in use until the queue pair is gone (the
// device may still move their bytes). The connection's mu guards it; the
// registering itself happens outside (Conn.regMR).
type bufferRegs struct {
	mrs  map[*Buffer]verbs.MR
	held []*Buffer
}

// lookup is b's registration on the connection, or nil.
func (r *bufferRegs) lookup(b *Buffer) verbs.MR { return r.mrs[b] }

// keep records mr as b's registration, unless a concurrent first use
// recorded one before: it returns the registration to use, and the caller
// deregisters mr when that is not mr.
func (r *bufferRegs) keep(b *Buffer, mr verbs.MR) verbs.MR {
	if old := r.mrs[b]; old != nil {
		return old
	}
	if r.mrs == nil {
		r.mrs = map[*Buffer]verbs.MR{}
	}
	r.mrs[b] = mr
	return mr
}

// drop forgets b's registration and deregisters it; false if there was
// none.
func (r *bufferRegs) drop(b *Buffer) bool {
	mr := r.mrs[b]
	if mr == nil {
		return false
	}
	delete(r.mrs, b)
	mr.Dereg()
	return true
}

// hold keeps b, which the caller acquired for it, in use until release.
func (r *bufferRegs) hold(b *Buffer) { r.held = append(r.held, b) }

// release deregisters every registration, calling forget for each Buffer
// first, and returns the Buffers held, for the caller to release once the
// queue pair is gone. The table is empty afterwards.
func (r *bufferRegs) release(forget func(*Buffer)) (held []*Buffer) {
	for b, mr := range r.mrs {
		forget(b)
		mr.Dereg()
	}
	held = r.held
	*r = bufferRegs{}
	return held
}
