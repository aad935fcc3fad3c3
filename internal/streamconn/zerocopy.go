package streamconn

import (
	"net"

	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/internal/zerocopy"
	"github.com/rdmanet/rdma/verbs"
)

// zeroCopy is the state of a connection that used Buffers, exposures or
// the rendezvous: most connections never do, and pay a pointer for it.
// Each field is a part that owns its rules; the Conn methods here take
// the lock, ask the part, and register or deregister memory on the
// connection's protection domain.
type zeroCopy struct {
	Regs      zerocopy.Regs[*Buffer]      // the Buffers registered for local access, and those held (mu)
	exposures onesided.Exposures[*Buffer] // the ranges exposed to the peer (mu)
	Window    zerocopy.Window             // the rendezvous writer's memory window
	bounce    zerocopy.Bounce             // the rendezvous reader's bounce buffer (rmu)
	ctlMR     verbs.MR                    // the rendezvous descriptor staging's registration (the writer's, wmu)
}

// ctl is the registration of the rendezvous descriptor's staging (in pd),
// made on the connection's first rendezvous: its own, because the send
// buffer's registration, which covers it at first, goes when the send
// buffer grows. Writer-owned (wmu).
func (zc *zeroCopy) ctl(pd verbs.PD, staging []byte) (verbs.MR, error) {
	if zc.ctlMR == nil {
		mr, err := pd.RegMR(staging, verbs.AccessLocalWrite)
		if err != nil {
			return nil, err
		}
		zc.ctlMR = mr
	}
	return zc.ctlMR, nil
}

// zeroCopyLocked is the connection's zeroCopy, made on the first use.
func (c registrations) zeroCopyLocked() *zeroCopy {
	if c.ZC == nil {
		c.ZC = new(zeroCopy)
	}
	return c.ZC
}

// zeroCopy is zeroCopyLocked for a caller without mu.
func (c registrations) zeroCopy() *zeroCopy {
	c.Core.Mu.Lock()
	defer c.Core.Mu.Unlock()
	return c.zeroCopyLocked()
}

// forgetIfUnused drops c, whose zeroCopy this is, from b's registrations
// once it holds none of b (no registration for local use, no exposure), so
// that a Buffer put back and reused for many connections keeps none of the
// old ones. Called with c's mu held.
func (zc *zeroCopy) forgetIfUnused(b *Buffer, c *Conn) {
	if zc.Regs.Lookup(b) != nil || zc.exposures.Holds(b) {
		return
	}
	b.forgetConn(c)
}

// drop ends b's exposures and, unless exposuresOnly, its registration on
// c, whose zeroCopy this is. Called with c's mu held.
func (zc *zeroCopy) drop(b *Buffer, c *Conn, exposuresOnly bool) {
	if !exposuresOnly {
		zc.Regs.Drop(b)
	}
	// Its exposures end too: the dereg fence makes sure no access of the
	// peer's touches the memory once Dereg returns, before Free unmaps it.
	zc.exposures.EndFor(b)
	zc.forgetIfUnused(b, c)
}

// endRegistrations ends everything of c's, whose zeroCopy this is, that
// covers a Buffer: the window, then the exposures and the registrations,
// each Buffer forgetting c. It returns the Buffers held until the queue
// pair is gone. Called with c's mu held.
func (zc *zeroCopy) endRegistrations(c *Conn) (held []*Buffer) {
	if mw := zc.Window.Take(); mw != nil {
		mw.Dealloc() // before the registrations it may be bound in
	}
	forget := func(b *Buffer) { b.forgetConn(c) }
	zc.exposures.Release(forget)
	return zc.Regs.Release(forget)
}

// registrations is the connection's part that registers Buffers on its
// protection domain (for local access, for an exposure) and deregisters
// them (a Buffer's Free, the connection's release): the registrations
// themselves are zeroCopy's Regs.
type registrations struct{ *Conn }

func (c *Conn) regs() registrations { return registrations{c} }

// bufferMR is the connection's registration of b (which the caller
// acquired), made on the first use: local access only (a send's source,
// a READ's destination), never remote. Called with neither mu held.
func (c registrations) bufferMR(b *Buffer) (verbs.MR, error) {
	c.Core.Mu.Lock()
	mr := c.zeroCopyLocked().Regs.Lookup(b)
	c.Core.Mu.Unlock()
	if mr != nil {
		return mr, nil
	}
	// Registration pins memory on a NIC and can take a while: not under
	// mu. Concurrent first uses (a Read, a Write, one-sided operations)
	// share the registration made first.
	// Where the device has memory windows, a rendezvous Write binds one
	// to the bytes it exposes, in this registration (rndvWindow).
	access := verbs.AccessLocalWrite
	c.Core.Mu.Lock()
	if windowUsedOn(&c.zeroCopyLocked().Window, c.EP.ID) {
		access |= verbs.AccessMWBind
	}
	c.Core.Mu.Unlock()
	return c.regMR(b, b.buf, access, func(zc *zeroCopy, mr verbs.MR) verbs.MR {
		return zc.Regs.Keep(b, mr)
	})
}

// regMR registers p, which lies in b (acquired by the caller), on the
// connection's protection domain with access, outside mu (a registration
// pins memory and can take a while) but never across the protection
// domain's release: releaseVerbs waits for registrations in progress, and
// one that finds the connection closed after it undoes itself. keep, under
// mu, records the registration in zc and returns the one to use (another
// one, when a concurrent caller registered first; then this one goes).
func (c registrations) regMR(b *Buffer, p []byte, access verbs.Access, keep func(zc *zeroCopy, mr verbs.MR) verbs.MR) (verbs.MR, error) {
	c.Core.Mu.Lock()
	if c.Core.Closed || c.Core.Torn {
		c.Core.Mu.Unlock()
		return nil, net.ErrClosed
	}
	c.registering++
	c.Core.Mu.Unlock()
	mr, err := c.EP.PD.RegMR(p, access)
	c.Core.Mu.Lock()
	defer c.Core.Mu.Unlock()
	c.registering--
	if err != nil {
		return nil, err
	}
	if c.Core.Closed || c.Core.Torn {
		mr.Dereg()
		return nil, net.ErrClosed
	}
	use := keep(c.zeroCopyLocked(), mr)
	if use != mr {
		mr.Dereg()
	}
	// For b's Free to end. b is acquired, so Free cannot be past its look
	// at its connections.
	b.noteConn(c.Conn)
	return use, nil
}

// dropBuffer ends b's exposures on the connection and, unless
// exposuresOnly (BufferPool.Put), deregisters b from it (Buffer.Free),
// unless its Close already did. Under mu, as Close's release does all of
// this under mu too: whichever comes second finds every registration of
// b on the connection gone once the first returns, so that neither Free
// nor Put goes on while an MR of the connection still covers b.
func (c registrations) dropBuffer(b *Buffer, exposuresOnly bool) {
	c.Core.Mu.Lock()
	defer c.Core.Mu.Unlock()
	if c.ZC != nil {
		c.ZC.drop(b, c.Conn, exposuresOnly)
	}
}

// holdUntilTeardown keeps buf in use until the connection's verbs objects
// are destroyed (releaseVerbs).
func (c registrations) holdUntilTeardown(buf *Buffer) {
	if buf.acquire() != nil {
		return // cannot happen: the caller holds it
	}
	c.Core.Mu.Lock()
	c.zeroCopyLocked().Regs.Hold(buf)
	c.Core.Mu.Unlock()
}

// releaseZeroCopy deregisters every Buffer registered on the connection
// and releases the rendezvous' memory, before the protection domain goes
// (releaseVerbs); it returns the Buffers held until the queue pair is
// gone, for the caller to release then.
//
// The Buffers' registrations and exposures go under mu, before c.ZC is
// cleared: a Buffer's Free (or a Put) that runs beside finds them either
// still there, and ends them itself (dropBuffer, under mu), or already
// gone, never half way, so it cannot unmap a Buffer that an MR of this
// connection still covers. Each Dereg waits only for memory copies in
// progress (the dereg fence), never on the peer.
func (c registrations) releaseZeroCopy() (held []*Buffer) {
	c.Core.Mu.Lock()
	zc := c.ZC
	if zc == nil {
		c.Core.Mu.Unlock()
		return nil
	}
	held = zc.endRegistrations(c.Conn)
	c.ZC = nil
	c.Core.Mu.Unlock()
	zc.bounce.Release()
	if zc.ctlMR != nil {
		zc.ctlMR.Dereg()
	}
	return held
}
