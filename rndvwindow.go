package rdma

import (
	"os"

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

// windowsLocked reports whether the connection's rendezvous Writes use a
// memory window, asking the device once. Called with mu held.
func (c *Conn) windowsLocked(zc *zeroCopy) bool {
	if zc.windows == 0 {
		zc.windows = -1
		if _, attr, err := deviceOf(c.id); err == nil && attr.MaxMW > 0 && !testNoWindows && envWindows != "0" {
			switch {
			case attr.VendorID != rxeVendorID:
				zc.windows = windowsChecked
			case envWindows == "1":
				zc.windows = windowsWholeOnly
			}
		}
	}
	return zc.windows > 0
}

// zeroCopy.windows beyond 0 (not asked) and -1 (none).
const (
	windowsChecked   = 1 // the device checks a window's own range
	windowsWholeOnly = 2 // it checks the region's: bind windows only to whole Buffers
)

// rndvWindow returns the window a rendezvous Write of p from buf binds,
// and buf's registration to bind it in; nil, nil when the Write registers
// what it exposes instead. Writer-owned (wmu).
func (c *Conn) rndvWindow(p []byte, buf *Buffer) (verbs.MW, verbs.MR) {
	c.mu.Lock()
	zc := c.zeroCopyLocked()
	ok, mw := c.windowsLocked(zc), zc.mw
	whole := zc.windows == windowsWholeOnly
	c.mu.Unlock()
	if !ok || whole && len(p) != len(buf.buf) {
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
			zc.windows = -1 // registrations from now on
			c.mu.Unlock()
			return nil, nil
		}
		c.mu.Lock()
		if c.torn || c.zc != zc {
			c.mu.Unlock()
			w.Dealloc()
			return nil, nil
		}
		zc.mw, zc.mwKey = w, w.RKey()
		c.mu.Unlock()
		mw = w
	}
	return mw, mr
}

// rndvExposure is how a rendezvous Write exposes its bytes: through the
// connection's window (mw), bound in the Buffer's registration (bufMR),
// or by a registration of their own (mr); key is the rkey announced.
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

// announceLocked makes the exposure reachable and returns the rkey the
// descriptor carries: it queues the bind of the window to p, for remote
// READ, under a new rkey, or takes the registration's. Called with mu held
// and a send slot free for the bind.
func (c *Conn) announceLocked(x *rndvExposure, p []byte) uint32 {
	if x.mw == nil {
		x.key = x.mr.RKey()
		return x.key
	}
	zc := c.zc
	zc.mwKey = verbs.NextRKey(zc.mwKey)
	zc.mwBind = verbs.MWBind{MW: x.mw, MR: x.bufMR, Addr: verbs.AddrOf(p), Length: uint64(len(p)),
		Access: verbs.AccessRemoteRead, RKey: zc.mwKey}
	c.sq.wrs[c.enqueueWRLocked(verbs.OpBindMW, 0, nil, nil, 0, 0, 0, false)].Bind = &zc.mwBind
	x.key, x.windowBound = zc.mwKey, true
	return x.key
}

// revokeRndv ends the exposure before the Write returns: the registration
// is deregistered; the window, once bound, is invalidated after the peer's
// done message, or deallocated when the Write gives up (the peer may be
// mid-READ, and the queue pair may be failing).
func (c *Conn) revokeRndv(x rndvExposure, gaveUp bool) {
	switch {
	case x.mr != nil:
		x.mr.Dereg()
	case !x.windowBound:
	case gaveUp:
		c.dropWindow()
	default:
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
		if c.sq.hasRoom() {
			break
		}
		c.mu.Unlock()
		c.await(c.sndReady, nil, false)
	}
	r := remoteOps.Get().(*remoteOp)
	*r = remoteOp{}
	s := c.enqueueWRLocked(verbs.OpLocalInv, 0, nil, nil, 0, 0, 0, true)
	c.sq.wrs[s].InvalidateRKey = rkey
	c.sq.ops[s] = r
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
		mw, zc.mw = zc.mw, nil
	}
	c.mu.Unlock()
	if mw != nil {
		mw.Dealloc()
	}
}
