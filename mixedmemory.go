package rdma

import (
	"time"

	"github.com/rdmanet/rdma/internal/ttlset"
)

// Mixed fleets remember, per process, the peers that answered an auto dial
// only on soft: a repeat dial to one goes to soft at once instead of
// waiting RDMAConnectTimeout again for an RDMA connection manager that is
// not there. The memory is bounded (softOnlyMax entries, the oldest go
// first) and expires (softOnlyTTL), so that a peer that gains a device is
// dialed over RDMA again within a minute; a mixed listener's soft side
// says that it has an RDMA side too (stream.FlagRDMACM), and the dialer
// then forgets the peer at once.

const (
	softOnlyMax = 1024
	softOnlyTTL = time.Minute
)

// softOnlyPeers is the process's memory, keyed by the peer's ip:port.
var softOnlyPeers = ttlset.New(softOnlyMax, softOnlyTTL)
