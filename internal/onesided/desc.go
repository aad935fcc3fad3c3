package onesided

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A descriptor names a region that one side registered for its peer: where
// it is, how long, the rkey that authorises access, and what access was
// granted. It is small enough to send in any message. Layout, version 1,
// little-endian, DescLen bytes:
//
//	0  magic "RDmr"
//	4  version  uint8  1
//	5  access   uint8  AccessRead | AccessWrite, at least one
//	6  reserved 2 bytes, zero
//	8  address  uint64 virtual address of the region's first byte
//	16 length   uint64 1..MaxLen
//	24 rkey     uint32
//	28 id       uint32 the exposing side's number for the region
//
// A descriptor is a claim, not a capability: what a peer may really do is
// decided by the exposing side's device, which checks the rkey, the bounds
// and the access of every request against the registration. Parse checks
// the form only, so that honest mistakes fail early with a clear message.
const (
	DescLen = 32
	// MaxLen bounds the length of one exposed region.
	MaxLen = 1 << 40

	descMagic   = "RDmr"
	descVersion = 1
)

// Access is what a descriptor grants the peer.
type Access uint8

const (
	AccessRead  Access = 1 << 0
	AccessWrite Access = 1 << 1
	accessAll          = AccessRead | AccessWrite
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case accessAll:
		return "read and write"
	}
	return fmt.Sprintf("access(%#x)", uint8(a))
}

// Desc is a parsed descriptor.
type Desc struct {
	Access Access
	Addr   uint64
	Len    uint64
	RKey   uint32
	ID     uint32
}

// ErrDesc is matched by every error of Parse and Check.
var ErrDesc = errors.New("bad descriptor")

// Marshal encodes d into b, which must hold DescLen bytes.
func (d Desc) Marshal(b []byte) {
	_ = b[DescLen-1]
	copy(b, descMagic)
	b[4] = descVersion
	b[5] = byte(d.Access)
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:], d.Addr)
	binary.LittleEndian.PutUint64(b[16:], d.Len)
	binary.LittleEndian.PutUint32(b[24:], d.RKey)
	binary.LittleEndian.PutUint32(b[28:], d.ID)
}

// descError is a malformed descriptor; it matches ErrDesc.
type descError string

func (e descError) Error() string        { return "bad descriptor: " + string(e) }
func (e descError) Is(target error) bool { return target == ErrDesc }

// Parse decodes and checks a descriptor.
func Parse(b []byte) (Desc, error) {
	if len(b) != DescLen {
		return Desc{}, descError("wrong length")
	}
	if string(b[:4]) != descMagic {
		return Desc{}, descError("not a descriptor (bad magic)")
	}
	if b[4] != descVersion {
		return Desc{}, descError("unsupported version")
	}
	d := Desc{
		Access: Access(b[5]),
		Addr:   binary.LittleEndian.Uint64(b[8:]),
		Len:    binary.LittleEndian.Uint64(b[16:]),
		RKey:   binary.LittleEndian.Uint32(b[24:]),
		ID:     binary.LittleEndian.Uint32(b[28:]),
	}
	switch {
	case d.Access == 0 || d.Access&^accessAll != 0:
		return Desc{}, descError("unknown access flags")
	case b[6] != 0 || b[7] != 0:
		return Desc{}, descError("reserved bytes set")
	case d.Len == 0 || d.Len > MaxLen:
		return Desc{}, descError("length out of range")
	case d.Addr > math.MaxUint64-d.Len:
		return Desc{}, descError("region wraps the address space")
	}
	return d, nil
}

// Check says whether an access of n bytes at offset off of the region, of
// kind want, is within what d claims, and returns the remote address.
func (d Desc) Check(off, n uint64, want Access) (uint64, error) {
	if d.Access&want != want {
		return 0, fmt.Errorf("%w: the region is exposed for %v, not %v", ErrDesc, d.Access, want)
	}
	if off > d.Len || n > d.Len-off {
		return 0, fmt.Errorf("%w: %d bytes at offset %d exceed the region's %d bytes", ErrDesc, n, off, d.Len)
	}
	return d.Addr + off, nil
}
