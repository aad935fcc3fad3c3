package verbs

// AccessMWBind (IBV_ACCESS_MW_BIND) lets memory windows be bound to a
// region. It grants no remote access by itself: a region registered with
// only local access and this flag is exposed to a peer only through a
// window, for as long as the window stays bound.
const AccessMWBind Access = 1 << 4

// MW is a type 2 memory window (ibv_alloc_mw with IBV_MW_TYPE_2): a
// handle that, once bound, gives the peer of one QP remote access to a
// range of an MR registered with AccessMWBind, under an rkey of its own.
// Binding (OpBindMW) and invalidating (OpLocalInv) are work requests on
// that QP's send queue, executed in order with the QP's other work
// requests, with no system call on hardware: cheaper than registering a
// range for each transfer, which is what windows are for.
//
// The fence of MR.Dereg holds for a window too: once an invalidation has
// completed (its work completion polled) or Dealloc has returned, the
// provider reads and writes nothing more through the window's rkey, and
// an access in flight finished before or fails at its requester with a
// remote access error.
type MW interface {
	// RKey is the rkey of the window's latest bind posted (before the
	// first, the rkey ibv_alloc_mw gave it). Each bind must name a new
	// rkey: NextRKey's.
	RKey() uint32
	// Dealloc is ibv_dealloc_mw: it revokes a bound window at once, and
	// frees the handle.
	Dealloc() error
}

// NextRKey is the rkey for a window's next bind: its current one with
// the low 8 bits (the key the consumer owns) moved on, as ibv_inc_rkey
// computes it. A peer that kept an rkey of an earlier bind finds it
// invalid.
func NextRKey(rkey uint32) uint32 {
	return rkey&^0xff | (rkey+1)&0xff
}

// MWBind is what a bind work request (OpBindMW) binds: MW to Length
// bytes of MR from Addr, for the remote access in Access (AccessRemoteRead
// and AccessRemoteWrite; the latter needs an MR with AccessLocalWrite),
// under rkey RKey (NextRKey of MW.RKey()). The bind must be posted on a
// QP of MR's protection domain; only that QP's peer may use the rkey.
// The window must be unbound, and Length not 0: a type 2 window is
// unbound by OpLocalInv (IBA o10-37.2.30 and o10-37.2.40, as rxe checks).
type MWBind struct {
	MW     MW
	MR     MR
	Addr   uint64
	Length uint64
	Access Access
	RKey   uint32
}
