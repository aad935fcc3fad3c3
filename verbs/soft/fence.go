package soft

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"
)

// The dereg fence. A NIC promises that once ibv_dereg_mr returns it reads
// and writes nothing of the region: an access in flight either finished
// before, or fails at the requester with a remote access error. The soft
// provider's engine copies between registered memory and its transport
// long after it checked a request (a READ response waits in the send
// queue, a WRITE's payload arrives as fast as the peer sends it), so every
// such copy passes the region's gate:
//
//   - A copy enters the gate, moves what the transport has now (one
//     non-blocking system call on TCP, what the shared-memory ring holds),
//     and exits. It never waits on the peer inside the gate: waiting for
//     more input or for room happens outside it.
//   - Dereg closes the gate and waits only for the copies inside it, each
//     bounded by one system call or one ring's worth of memory copy, never
//     by the peer.
//   - A copy that finds the gate closed moves nothing more. A payload the
//     peer is still feeding (WRITE, SEND) is skipped and the request fails
//     as a remote access error; a READ response or send payload partly
//     written ends the connection (the frame cannot be finished honestly),
//     and the requester's WR completes with an error.
//
// A gate is per MR, so a Dereg waits for no copy of another region.
type gate struct {
	state atomic.Uint64 // gateClosed | copies in progress
}

const gateClosed = 1 << 63

// errFenced reports a copy stopped by a closed gate: the region was
// deregistered while the access was in flight.
var errFenced = errors.New("soft: memory region deregistered during the access")

// enter begins a copy to or from the gated memory; false once the gate is
// closed, and then nothing may be copied. A nil gate (memory that is not a
// registered region's: headers, inline data) is always open.
func (g *gate) enter() bool {
	if g == nil {
		return true
	}
	if g.state.Add(1)&gateClosed != 0 {
		g.state.Add(^uint64(0))
		return false
	}
	return true
}

// exit ends a copy begun by a successful enter.
func (g *gate) exit() {
	if g != nil {
		g.state.Add(^uint64(0))
	}
}

// close shuts the gate and returns once no copy is inside it. Each copy is
// a bounded move of bytes that are already there, so this waits
// microseconds, and never on a peer.
func (g *gate) close() {
	g.state.Or(gateClosed)
	for i := 0; g.state.Load() != gateClosed; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// enterAll enters every gate of gs (nil ones are open), or none: false if
// one is closed.
func enterAll(gs []*gate) bool {
	for i, g := range gs {
		if !g.enter() {
			exitAll(gs[:i])
			return false
		}
	}
	return true
}

// exitAll exits every gate of gs, entered by enterAll.
func exitAll(gs []*gate) {
	for _, g := range gs {
		g.exit()
	}
}
