package verbs

// Access is ibv_access_flags: what may be done to a memory region.
type Access uint32

const (
	AccessLocalWrite  Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE: receives and READ responses land here
	AccessRemoteWrite Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE (requires LocalWrite)
	AccessRemoteRead  Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
)

// MR is a registered memory region (struct ibv_mr).
type MR interface {
	// Bytes is the registered memory.
	Bytes() []byte
	// Addr is the address of the first registered byte, as SGEs and remote
	// work requests name it.
	Addr() uint64
	// Len is the registered length.
	Len() int
	// LKey authorises local access in SGEs.
	LKey() uint32
	// RKey authorises remote access by the peer.
	RKey() uint32
	// Access is the set of access flags granted at registration.
	Access() Access
	// Dereg is ibv_dereg_mr. Later remote accesses with the rkey fail with a
	// remote access error, local uses of the lkey with a protection error.
	//
	// The fence: once Dereg returns, the provider reads and writes nothing
	// of the region, so its memory may be freed or reused at once. An
	// access in flight (a peer's WRITE or SEND still arriving, a READ
	// response still leaving, a local WR's buffer) either finished before
	// or fails: a payload still arriving is discarded and its requester
	// gets a remote access error, and a response or send that cannot be
	// finished ends the connection. Dereg never waits on a peer
	// (verbstest's DeregFence cases hold every provider to this).
	Dereg() error
}

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at Addr, in
// the MR whose lkey is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SGEOf describes buf, which must lie inside mr.
func SGEOf(mr MR, buf []byte) SGE {
	return SGE{Addr: AddrOf(buf), Length: uint32(len(buf)), LKey: mr.LKey()}
}
