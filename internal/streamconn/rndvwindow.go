package streamconn

import (
	"os"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/internal/zerocopy"
	"github.com/rdmanet/rdma/verbs"
)

// The rendezvous' memory window: internal/zerocopy/window.go (Window,
// RndvExposure) says how a rendezvous Write exposes its bytes; here the
// connection allocates, binds, invalidates and drops the window.

// NoWindows, when it points to true, makes rendezvous Writes register
// what they expose, as on a device without windows (tests of both paths on
// one provider; the root package points it at its tests' switch).
var NoWindows = new(bool)

// windowsEnv is the public WindowsEnv: how rendezvous Writes expose their
// bytes (0: always by a registration; 1: through a memory window wherever
// the device has them, rxe included; unset: through windows except on rxe).
const windowsEnv = "RDMA_MEMORY_WINDOWS"

var envWindows = os.Getenv(windowsEnv)

// windowUsedOn reports whether rendezvous Writes on the connection of id
// use the window w, asking its device once. Called with the connection's
// mu held.
func windowUsedOn(w *zerocopy.Window, id verbs.CMID) bool {
	if !w.Decided() {
		_, attr, err := core.DeviceOf(id)
		env := envWindows
		if *NoWindows {
			env = "0"
		}
		w.Decide(attr, err, env)
	}
	return w.Used()
}

// rndvWindow returns the window a rendezvous Write of p from buf binds,
// and buf's registration to bind it in; nil, nil when the Write registers
// what it exposes instead. Writer-owned (wmu).
func (c rendezvous) rndvWindow(p []byte, buf *Buffer) (verbs.MW, verbs.MR) {
	c.Core.Mu.Lock()
	zc := c.regs().zeroCopyLocked()
	windowUsedOn(&zc.Window, c.EP.ID)
	ok, mw := zc.Window.Fits(p, len(buf.buf)), zc.Window.MW()
	c.Core.Mu.Unlock()
	if !ok {
		return nil, nil
	}
	mr, err := c.regs().bufferMR(buf)
	if err != nil || mr.Access()&verbs.AccessMWBind == 0 {
		return nil, nil
	}
	if mw == nil {
		w, err := c.EP.PD.AllocMW()
		if err != nil {
			c.Core.Mu.Lock()
			zc.Window.UseRegistrations()
			c.Core.Mu.Unlock()
			return nil, nil
		}
		c.Core.Mu.Lock()
		if c.Core.Torn || c.ZC != zc {
			c.Core.Mu.Unlock()
			w.Dealloc()
			return nil, nil
		}
		zc.Window.Allocated(w)
		c.Core.Mu.Unlock()
		mw = w
	}
	return mw, mr
}

// exposeRndv prepares the exposure of p (in buf): the window where the
// connection uses one, else a registration of p for remote READ.
func (c rendezvous) exposeRndv(p []byte, buf *Buffer) (zerocopy.RndvExposure, error) {
	if mw, bufMR := c.rndvWindow(p, buf); mw != nil {
		return zerocopy.RndvExposure{MW: mw, BufMR: bufMR}, nil
	}
	mr, err := c.EP.PD.RegMR(p, verbs.AccessRemoteRead)
	return zerocopy.RndvExposure{MR: mr}, err
}

// announceLocked makes the exposure reachable and returns the rkey the
// descriptor carries, queueing the window's bind. Called with mu held and
// the bind's send slot free.
func (c rendezvous) announceLocked(x *zerocopy.RndvExposure, p []byte) uint32 {
	bind, key := x.Announce(&c.ZC.Window, p)
	if bind != nil {
		c.SQ.WRs[c.enqueueWRLocked(verbs.OpBindMW, 0, nil, nil, 0, 0, 0, false)].Bind = bind
	}
	return key
}

// revokeRndv ends the exposure before the Write returns (revocation).
func (c rendezvous) revokeRndv(x zerocopy.RndvExposure, gaveUp bool) {
	switch x.Revocation(gaveUp) {
	case zerocopy.RevokeDereg:
		x.MR.Dereg()
	case zerocopy.RevokeDealloc:
		c.dropWindow()
	case zerocopy.RevokeInvalidate:
		c.invalidateWindow(x.Key)
	}
}

// invalidateWindow revokes the window's rkey and returns once the
// invalidation completed: from then on the peer reaches nothing through
// it. If the connection fails first, the window is deallocated, which
// revokes it too.
func (c rendezvous) invalidateWindow(rkey uint32) {
	for {
		c.Core.Mu.Lock()
		if c.Remote().remoteErrLocked() != nil {
			c.Core.Mu.Unlock()
			c.dropWindow()
			return
		}
		if c.SQ.HasRoom() {
			break
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.SndReady, nil, false)
	}
	r := sendq.NewOp()
	s := c.enqueueWRLocked(verbs.OpLocalInv, 0, nil, nil, 0, 0, 0, true)
	c.SQ.WRs[s].InvalidateRKey = rkey
	c.SQ.Ops[s] = r
	c.send().unlockSubmit()
	if st, err := c.Remote().awaitOp(r, nil); err != nil || st != verbs.WCSuccess {
		c.dropWindow()
	}
}

// dropWindow deallocates the connection's window, which revokes it at
// once; a later rendezvous allocates another.
func (c rendezvous) dropWindow() {
	c.Core.Mu.Lock()
	var mw verbs.MW
	if zc := c.ZC; zc != nil {
		mw = zc.Window.Take()
	}
	c.Core.Mu.Unlock()
	if mw != nil {
		mw.Dealloc()
	}
}
