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
//
// A memory window's binding reuses one gate across binds (mw.go): each
// unbind closes it, each bind opens it again under the next generation. A
// copy is admitted under one generation and holds a gateRef, the gate and
// that generation; it enters only while the gate is open at that same
// generation. So a READ response queued under an earlier bind stays shut
// out once that bind was invalidated, even after the window is bound
// again, as if each bind had a gate of its own. A region's gate is never
// opened again: its references all hold generation 0.
type gate struct {
	// gateClosed | generation<<gateGenShift | copies in progress. A
	// failed enter counts itself in for a moment too: the count is not
	// only the copies in progress.
	state atomic.Uint64
}

const (
	gateClosed   = 1 << 63
	gateGenShift = 32
	gateCount    = 1<<gateGenShift - 1 // the copies in progress
	// gateGenMax is the last generation: a gate there is not opened
	// again (a window takes a new one, mw.go), so a generation never
	// wraps round to one a stale reference holds.
	gateGenMax = 1<<(63-gateGenShift) - 1
)

// errFenced reports a copy stopped by a closed gate: the region was
// deregistered while the access was in flight.
var errFenced = errors.New("soft: memory region deregistered during the access")

// gateRef is a gate as one admission saw it: copies under it enter only
// while the gate is open at that generation. The zero gateRef (memory
// that is not a registered region's: headers, inline data) is always
// open.
type gateRef struct {
	g    *gate
	open uint64 // the state's bits above the count while open then: generation<<gateGenShift
}

// ref is a reference to g at generation 0, a region's.
func (g *gate) ref() gateRef { return gateRef{g: g} }

// enter begins a copy to or from the gated memory; false once the gate is
// closed or opened again since r was taken, and then nothing may be
// copied. One atomic add and a compare, as a plain closed bit would cost.
func (r gateRef) enter() bool {
	if r.g == nil {
		return true
	}
	if r.g.state.Add(1)&^gateCount != r.open {
		r.g.state.Add(^uint64(0))
		return false
	}
	return true
}

// exit ends a copy begun by a successful enter.
func (r gateRef) exit() {
	if r.g != nil {
		r.g.state.Add(^uint64(0))
	}
}

// admit enters g whatever its generation, as long as it is open, and
// returns the reference that copies under this admission use; false when
// g is closed. Inside, g cannot be closed and opened again (close waits
// for the count), so what the opener set up before opening stays as it
// is until the caller exits r.
func (g *gate) admit() (gateRef, bool) {
	s := g.state.Add(1)
	if s&gateClosed != 0 {
		g.state.Add(^uint64(0))
		return gateRef{}, false
	}
	return gateRef{g: g, open: s &^ gateCount}, true
}

// close shuts the gate and returns once no copy is inside it.
func (g *gate) close() {
	g.shut()
	g.drain()
}

// shut closes the gate to new copies, without waiting for those inside.
func (g *gate) shut() { g.state.Or(gateClosed) }

// drain returns once no copy is inside g (closed). Each copy is a bounded
// move of bytes that are already there, so this waits microseconds, and
// never on a peer.
func (g *gate) drain() {
	for i := 0; g.state.Load()&gateCount != 0; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// reopenable reports whether g (closed) may be opened again: false at
// the last generation.
func (g *gate) reopenable() bool {
	return (g.state.Load()&^(gateClosed|gateCount))>>gateGenShift < gateGenMax
}

// reopen opens g (closed, drained, reopenable) under the next generation,
// so that no reference taken before matches it. An add, not a store: a
// failed enter may be counted in at this moment.
func (g *gate) reopen() {
	g.state.Add(1<<gateGenShift + gateClosed) // the closed bit added to itself carries out: clear
}

// enterAll enters every gate of rs (zero ones are open), or none: false
// if one is closed or opened again since.
func enterAll(rs []gateRef) bool {
	for i, r := range rs {
		if !r.enter() {
			exitAll(rs[:i])
			return false
		}
	}
	return true
}

// exitAll exits every gate of rs, entered by enterAll.
func exitAll(rs []gateRef) {
	for _, r := range rs {
		r.exit()
	}
}
