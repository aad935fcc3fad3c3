package rdma

import (
	"os"

	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/verbs"
)

// The rendezvous' memory window. Where the device has type 2 windows, a
// rendezvous Write does not register the bytes it exposes: the Buffer's
// registration on the connection (local access, and AccessMWBind) stays,
// and the Write binds the connection's window to exactly those bytes for
// remote READ, a work request posted just before the descriptor, then
// invalidates it, a work request whose completion it waits for, before
// it returns. The window is bound on the connection's own queue pair,
// so only this peer may use its rkey, and each bind gives it a new one.
// A bind and an invalidation cost a work request each where a
// registration and a deregistration cost two system calls and the pinning
// of every page (147 us for 1 MiB in the Soft-RoCE guest). A Write that
// gives up mid-transfer deallocates the window instead, which revokes it
// at once, whatever the queue pair's state.

// rxeVendorID is the vendor ID Soft-RoCE (rxe) reports. rxe's windows
// are not used unless asked for (RDMA_MEMORY_WINDOWS=1), for two reasons:
//   - Its responder checks an access through a window against the range
//     of the window's region, not the window's (Linux 6.1, verbstest's
//     MWBounds): a window on part of a Buffer would expose all of it, so
//     even when asked for, a Write there binds the window only when it
//     spans its whole Buffer, and registers a range of its own otherwise.
//   - In the Soft-RoCE guest they moved 1 MiB Buffers no faster than
//     registrations (0.86x against 0.87x ib_read_bw) at more user CPU a
//     message (2.2 against 1.6 ms: the wait for the invalidation spins
//     where a deregistration is a system call); docs/design.md.
const rxeVendorID = 0xffffff

// testNoWindows makes rendezvous Writes register what they expose, as on
// a device without windows (tests of both paths on one provider).
var testNoWindows bool

// WindowsEnv chooses how rendezvous Writes expose their bytes: 0 always
// by a registration (a way around a device whose windows misbehave, and to
// compare the two), 1 through a memory window wherever the device has
// them, rxe included; unset, through windows except on rxe.
const WindowsEnv = "RDMA_MEMORY_WINDOWS"

var envWindows = os.Getenv(WindowsEnv)

// rndvWindow is the connection's rendezvous window: whether the device
// has windows (mode), the window once allocated, its last rkey and the
// argument of its last bind. mode and mw are under mu; key and bind are
// the writer's (wmu).
type rndvWindow struct {
	mode windowMode
	mw   verbs.MW
	key  uint32
	bind verbs.MWBind
}

// windowMode says whether and how rendezvous Writes use a window.
type windowMode int8

const (
	windowsUnknown   windowMode = 0  // the device not asked yet
	windowsNone      windowMode = -1 // registrations
	windowsChecked   windowMode = 1  // the device checks a window's own range
	windowsWholeOnly windowMode = 2  // it checks the region's: bind windows only to whole Buffers
)

// modeFor is the mode for a device with attr (err: it could not be
// asked), under the switches testNoWindows and env (WindowsEnv's value).
func modeFor(attr verbs.DeviceAttr, err error, env string) windowMode {
	switch {
	case err != nil || attr.MaxMW <= 0 || testNoWindows || env == "0":
		return windowsNone
	case attr.VendorID != rxeVendorID:
		return windowsChecked
	case env == "1":
		return windowsWholeOnly
	}
	return windowsNone
}

// used reports whether rendezvous Writes use the window (mode decided).
func (w *rndvWindow) used() bool { return w.mode > 0 }

// fits reports whether a Write of p from buf may use the window: where
// the device checks only the region's range, p must be all of buf.
func (w *rndvWindow) fits(p []byte, buf *Buffer) bool {
	return w.used() && (w.mode != windowsWholeOnly || len(p) == len(buf.buf))
}

// nextBind is the bind of mw, the window, to p, in mr, for remote READ under a
// new rkey, which it returns too. Each bind's rkey differs from the last,
// so that a Desc of an earlier transfer reaches nothing.
func (w *rndvWindow) nextBind(mw verbs.MW, mr verbs.MR, p []byte) (*verbs.MWBind, uint32) {
	w.key = verbs.NextRKey(w.key)
	w.bind = verbs.MWBind{MW: mw, MR: mr, Addr: verbs.AddrOf(p), Length: uint64(len(p)),
		Access: verbs.AccessRemoteRead, RKey: w.key}
	return &w.bind, w.key
}

// take removes the window, for the caller to deallocate (nil: none).
func (w *rndvWindow) take() verbs.MW {
	mw := w.mw
	w.mw = nil
	return mw
}

// usedOn reports whether rendezvous Writes on the connection of id use
// the window, asking its device once. Called with the connection's mu
// held.
func (w *rndvWindow) usedOn(id verbs.CMID) bool {
	if w.mode == windowsUnknown {
		_, attr, err := deviceOf(id)
		w.mode = modeFor(attr, err, envWindows)
	}
	return w.used()
}

// rndvWindow returns the window a rendezvous Write of p from buf binds,
// and buf's registration to bind it in; nil, nil when the Write registers
// what it exposes instead. Writer-owned (wmu).
func (c *Conn) rndvWindow(p []byte, buf *Buffer) (verbs.MW, verbs.MR) {
	c.mu.Lock()
	zc := c.zeroCopyLocked()
	zc.window.usedOn(c.id)
	ok, mw := zc.window.fits(p, buf), zc.window.mw
	c.mu.Unlock()
	if !ok {
		return nil, nil
	}
	mr, err := c.bufferMR(buf)
	if err != nil || mr.Access()&verbs.AccessMWBind == 0 {
		return nil, nil
	}
	if mw == nil {
		w, err := c.pd.AllocMW()
		if err != nil {
			c.mu.Lock()
			zc.window.mode = windowsNone // registrations from now on
			c.mu.Unlock()
			return nil, nil
		}
		c.mu.Lock()
		if c.torn || c.zc != zc {
			c.mu.Unlock()
			w.Dealloc()
			return nil, nil
		}
		zc.window.mw, zc.window.key = w, w.RKey()
		c.mu.Unlock()
		mw = w
	}
	return mw, mr
}

// rndvExposure is how one rendezvous Write exposes its bytes: through
// the connection's window (mw), bound in the Buffer's registration
// (bufMR), or by a registration of their own (mr); key is the rkey
// announced, and windowBound says the window's bind was queued.
type rndvExposure struct {
	mw          verbs.MW
	bufMR, mr   verbs.MR
	key         uint32
	windowBound bool
}

// exposeRndv prepares the exposure of p (in buf): the window where the
// connection uses one, else a registration of p for remote READ.
func (c *Conn) exposeRndv(p []byte, buf *Buffer) (rndvExposure, error) {
	if mw, bufMR := c.rndvWindow(p, buf); mw != nil {
		return rndvExposure{mw: mw, bufMR: bufMR}, nil
	}
	mr, err := c.pd.RegMR(p, verbs.AccessRemoteRead)
	return rndvExposure{mr: mr}, err
}

// announce returns the rkey the descriptor carries and, through a window,
// the bind of w's window to p under a new rkey (for remote READ), to be
// queued before the descriptor; nil for a registration, whose rkey it is.
func (x *rndvExposure) announce(w *rndvWindow, p []byte) (*verbs.MWBind, uint32) {
	if x.mw == nil {
		x.key = x.mr.RKey()
		return nil, x.key
	}
	bind, key := w.nextBind(x.mw, x.bufMR, p)
	x.key, x.windowBound = key, true
	return bind, key
}

// revocation is how an exposure ends before its Write returns.
type revocation int8

const (
	revokeNothing    revocation = iota // a window never bound: the peer had no rkey
	revokeDereg                        // deregister the registration of its own
	revokeInvalidate                   // invalidate the window's rkey, and wait for it
	revokeDealloc                      // deallocate the window: at once, whatever the queue pair's state
)

// revocation is the exposure's end: the registration is deregistered; the
// window, once bound, is invalidated after the peer's done message, or
// deallocated when the Write gives up (the peer may be mid-READ, and the
// queue pair may be failing).
func (x *rndvExposure) revocation(gaveUp bool) revocation {
	switch {
	case x.mr != nil:
		return revokeDereg
	case !x.windowBound:
		return revokeNothing
	case gaveUp:
		return revokeDealloc
	}
	return revokeInvalidate
}

// announceLocked makes the exposure reachable and returns the rkey the
// descriptor carries, queueing the window's bind. Called with mu held and
// the bind's send slot free.
func (c *Conn) announceLocked(x *rndvExposure, p []byte) uint32 {
	bind, key := x.announce(&c.zc.window, p)
	if bind != nil {
		c.sq.WRs[c.enqueueWRLocked(verbs.OpBindMW, 0, nil, nil, 0, 0, 0, false)].Bind = bind
	}
	return key
}

// revokeRndv ends the exposure before the Write returns (revocation).
func (c *Conn) revokeRndv(x rndvExposure, gaveUp bool) {
	switch x.revocation(gaveUp) {
	case revokeDereg:
		x.mr.Dereg()
	case revokeDealloc:
		c.dropWindow()
	case revokeInvalidate:
		c.invalidateWindow(x.key)
	}
}

// invalidateWindow revokes the window's rkey and returns once the
// invalidation completed: from then on the peer reaches nothing through
// it. If the connection fails first, the window is deallocated, which
// revokes it too.
func (c *Conn) invalidateWindow(rkey uint32) {
	for {
		c.mu.Lock()
		if c.remoteErrLocked() != nil {
			c.mu.Unlock()
			c.dropWindow()
			return
		}
		if c.sq.HasRoom() {
			break
		}
		c.mu.Unlock()
		c.await(c.sndReady, nil, false)
	}
	r := sendq.NewOp()
	s := c.enqueueWRLocked(verbs.OpLocalInv, 0, nil, nil, 0, 0, 0, true)
	c.sq.WRs[s].InvalidateRKey = rkey
	c.sq.Ops[s] = r
	c.unlockSubmit()
	if st, err := c.awaitOp(r, nil); err != nil || st != verbs.WCSuccess {
		c.dropWindow()
	}
}

// dropWindow deallocates the connection's window, which revokes it at
// once; a later rendezvous allocates another.
func (c *Conn) dropWindow() {
	c.mu.Lock()
	var mw verbs.MW
	if zc := c.zc; zc != nil {
		mw = zc.window.take()
	}
	c.mu.Unlock()
	if mw != nil {
		mw.Dealloc()
	}
}
