package rdma

import (
	"fmt"

	"github.com/rdmanet/rdma/internal/onesided"
)

// One-sided operations on a Conn (see the package doc and docs/design.md,
// "One-sided operations"). One side exposes a range of a Buffer to the
// connection's peer (Expose) and sends it the Desc; the peer then writes
// (WriteRemote, WriteRemoteNotify) and reads (ReadRemote) that range with
// RDMA WRITE and READ on the connection's queue pair, without the exposing
// side taking part, until Unexpose, Buffer.Free or Close.
//
// What a Desc allows is decided by the exposing side's device, not by the
// Desc: the range is registered on this connection's own protection
// domain, so only this connection's peer can reach it, and the device
// checks the rkey, the bounds and the access of every request against the
// registration. A Desc is checked locally first (form, access, bounds), so
// honest mistakes fail with ErrBadDesc and break nothing; an access the
// device refuses fails with ErrRemoteAccess and, as on every RDMA device,
// breaks this connection on both sides (other connections go on).

// Desc describes a range one side of a connection exposed to the other:
// what the peer needs to write or read it. Its layout is fixed (that of
// package capi's descriptors; internal/onesided/desc.go), so it can be
// sent as bytes in any message: magic "RDmr", version, access, address,
// length, rkey and the exposing connection's number for the range.
type Desc [onesided.DescLen]byte

// Access is what an exposed range lets the peer do: AccessRead,
// AccessWrite, or both or'ed.
type Access int

const (
	AccessRead  = Access(onesided.AccessRead)
	AccessWrite = Access(onesided.AccessWrite)
)

func (a Access) String() string {
	if a <= 0 || a > AccessRead|AccessWrite {
		return fmt.Sprintf("Access(%d)", int(a))
	}
	return onesided.Access(a).String()
}

// NotifyValueMax is the largest value WriteRemoteNotify carries.
const NotifyValueMax = onesided.NotifyValueMax

var (
	// ErrBadDesc is matched by the error of a one-sided operation whose
	// Desc is malformed or does not allow it (its access, its bounds),
	// found before anything was sent: the connection is intact. Unexpose
	// returns it for a Desc that is not a live exposure of its connection.
	ErrBadDesc = onesided.ErrDesc
	// ErrRemoteAccess is matched by the error of a one-sided operation
	// that the peer's device refused: a wrong rkey, out of the registered
	// bounds, an access not granted, or a range no longer exposed. The
	// connection is then broken on both sides.
	ErrRemoteAccess = onesided.ErrRemoteAccess
)
