package zerocopy

import "github.com/rdmanet/rdma/verbs"

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

// RxeVendorID is the vendor ID Soft-RoCE (rxe) reports. rxe's windows
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
const RxeVendorID = 0xffffff

// Window is the connection's rendezvous window: whether the device
// has windows (mode), the window once allocated, its last rkey and the
// argument of its last bind. mode and mw are under mu; key and bind are
// the writer's (wmu).
type Window struct {
	mode WindowMode
	mw   verbs.MW
	key  uint32
	bind verbs.MWBind
}

// WindowMode says whether and how rendezvous Writes use a window.
type WindowMode int8

const (
	WindowsUnknown   WindowMode = 0  // the device not asked yet
	WindowsNone      WindowMode = -1 // registrations
	WindowsChecked   WindowMode = 1  // the device checks a window's own range
	WindowsWholeOnly WindowMode = 2  // it checks the region's: bind windows only to whole Buffers
)

// ModeFor is the mode for a device with attr (err: it could not be
// asked), under env, the value of the root package's WindowsEnv (tests
// that want registrations pass "0").
func ModeFor(attr verbs.DeviceAttr, err error, env string) WindowMode {
	switch {
	case err != nil || attr.MaxMW <= 0 || env == "0":
		return WindowsNone
	case attr.VendorID != RxeVendorID:
		return WindowsChecked
	case env == "1":
		return WindowsWholeOnly
	}
	return WindowsNone
}

// Used reports whether rendezvous Writes use the window (mode decided).
func (w *Window) Used() bool { return w.mode > 0 }

// Fits reports whether a Write of p from a Buffer of whole bytes may use
// the window: where the device checks only the region's range, p must be
// all of the Buffer.
func (w *Window) Fits(p []byte, whole int) bool {
	return w.Used() && (w.mode != WindowsWholeOnly || len(p) == whole)
}

// NextBind is the bind of mw, the window, to p, in mr, for remote READ under a
// new rkey, which it returns too. Each bind's rkey differs from the last,
// so that a Desc of an earlier transfer reaches nothing.
func (w *Window) NextBind(mw verbs.MW, mr verbs.MR, p []byte) (*verbs.MWBind, uint32) {
	w.key = verbs.NextRKey(w.key)
	w.bind = verbs.MWBind{MW: mw, MR: mr, Addr: verbs.AddrOf(p), Length: uint64(len(p)),
		Access: verbs.AccessRemoteRead, RKey: w.key}
	return &w.bind, w.key
}

// Take removes the window, for the caller to deallocate (nil: none).
func (w *Window) Take() verbs.MW {
	mw := w.mw
	w.mw = nil
	return mw
}

// Mode is how the window is used: WindowsUnknown until Decide.
func (w *Window) Mode() WindowMode { return w.mode }

// Decided reports whether the device was asked (Decide).
func (w *Window) Decided() bool { return w.mode != WindowsUnknown }

// Decide sets the mode for a device with attr (err: it could not be
// asked), under env (ModeFor).
func (w *Window) Decide(attr verbs.DeviceAttr, err error, env string) {
	w.mode = ModeFor(attr, err, env)
}

// UseRegistrations makes rendezvous Writes register what they expose from
// now on (a window could not be allocated).
func (w *Window) UseRegistrations() { w.mode = WindowsNone }

// MW is the window, nil until Allocated.
func (w *Window) MW() verbs.MW { return w.mw }

// Allocated records mw as the window; its first rkey is the one to move
// on from.
func (w *Window) Allocated(mw verbs.MW) { w.mw, w.key = mw, mw.RKey() }

// RndvExposure is how one rendezvous Write exposes its bytes: through
// the connection's window (mw), bound in the Buffer's registration
// (bufMR), or by a registration of their own (mr); key is the rkey
// announced, and windowBound says the window's bind was queued.
type RndvExposure struct {
	MW          verbs.MW
	BufMR, MR   verbs.MR
	Key         uint32
	windowBound bool
}

// Announce returns the rkey the descriptor carries and, through a window,
// the bind of w's window to p under a new rkey (for remote READ), to be
// queued before the descriptor; nil for a registration, whose rkey it is.
func (x *RndvExposure) Announce(w *Window, p []byte) (*verbs.MWBind, uint32) {
	if x.MW == nil {
		x.Key = x.MR.RKey()
		return nil, x.Key
	}
	bind, key := w.NextBind(x.MW, x.BufMR, p)
	x.Key, x.windowBound = key, true
	return bind, key
}

// Revocation is how an exposure ends before its Write returns.
type Revocation int8

const (
	RevokeNothing    Revocation = iota // a window never bound: the peer had no rkey
	RevokeDereg                        // deregister the registration of its own
	RevokeInvalidate                   // invalidate the window's rkey, and wait for it
	RevokeDealloc                      // deallocate the window: at once, whatever the queue pair's state
)

// Revocation is the exposure's end: the registration is deregistered; the
// window, once bound, is invalidated after the peer's done message, or
// deallocated when the Write gives up (the peer may be mid-READ, and the
// queue pair may be failing).
func (x *RndvExposure) Revocation(gaveUp bool) Revocation {
	switch {
	case x.MR != nil:
		return RevokeDereg
	case !x.windowBound:
		return RevokeNothing
	case gaveUp:
		return RevokeDealloc
	}
	return RevokeInvalidate
}
