// Package zerocopy holds rdma.Conn's zero-copy parts that own their rules
// and do no I/O of their own: Regs, the Buffers registered on a connection
// for local access; Window and RndvExposure, how a rendezvous Write
// exposes its bytes (a memory window or a registration) and how that ends;
// Bounce, the rendezvous reader's bounce buffer. The connection guards
// them with its locks and does the verbs calls. It also holds what tests
// of any package tune in the zero-copy paths (the rendezvous floor).
package zerocopy

import "sync/atomic"

// DefaultRendezvousFloor is the smallest rendezvous threshold a Config
// may set: below it a READ's round trip costs more than the copy it saves
// (docs/design.md, "When a Write copies").
const DefaultRendezvousFloor = 64 << 10

// rendezvousFloor is the floor connections apply, read when each is set
// up. Tests lower it (SetRendezvousFloor) so that every transfer of a
// suite crosses the rendezvous.
var rendezvousFloor atomic.Int64

func init() { rendezvousFloor.Store(DefaultRendezvousFloor) }

// RendezvousFloor is the floor now.
func RendezvousFloor() int { return int(rendezvousFloor.Load()) }

// SetRendezvousFloor sets the floor and returns the previous one.
func SetRendezvousFloor(n int) int { return int(rendezvousFloor.Swap(int64(n))) }
