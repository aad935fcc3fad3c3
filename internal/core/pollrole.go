package core

import (
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/spinlimit"
	"github.com/rdmanet/rdma/verbs"
)

// Completions are driven by the callers that need them. A Read without
// data, a Write without room, CloseWrite and Close's drain call Await,
// and the first of them takes the poll role: on its own goroutine it polls
// the CQ, busy-polls a little while (PollState.Spin), then arms the CQ and
// sleeps on the completion channel, which parks on the runtime poller
// (soft: reads its QP's transport), and applies what it polls. So on the
// latency path the completion reaches the goroutine that wants it with no
// hand-off. A caller that finds the role taken waits on its own channel
// (RcvReady, SndReady), which the holder pokes when what it applied
// concerns that side; when the holder lets go with others waiting, it
// pokes them so that one takes the role over.
//
// The holder's sleep ends with an event, or with the channel's deadline:
// the holder's own deadline, or one moved into the past by interrupt,
// which Close, a deadline change and a failure found elsewhere use to make
// the holder look again.

// PollState is the poll role: who holds it and who waits (under the
// connection's Mu), the interrupt sequence (atomic), and the holder's own
// state, which only the holder (or releaseVerbs, once nobody holds the
// role) touches: the batch, the events to acknowledge, and how it spins.
type PollState struct {
	Waiters int           // callers waiting for the holder (under mu)
	intrSeq atomic.Uint64 // moved by interrupt

	// One poll's batch. 16: every connection carries it (640 bytes; 32
	// put a Conn in the 2688-byte size class instead of 2048), and a
	// batch of 16 already takes a poll's fixed cost off each completion.
	wcs     [16]verbs.WC
	Unacked int           // completion events not yet acknowledged
	Spin    time.Duration // busy-poll budget before sleeping (PollTime)
	Reach   time.Duration // the budget a spin gets: spin, stretched by learn (never less)
	Busy    bool          // Config.BusyPoll: poll until something arrives, never sleep
	Held    bool          // a caller holds the role (under mu)
	Claimed bool          // settle waits to take the role: nobody else takes it (under mu)
	Misses  int           // waits in a row that a spin did not catch
	skipped int           // waits without a spin since spinning turned off
	Spins   uint64        // spins begun (the root's Stats)
	Refused uint64        // spins the process's spin limit refused: the wait slept at once (the root's Stats)
	Sleeps  uint64        // sleeps on the channel (the root's Stats)
	Caught  uint64        // spins that caught completions (the root's Stats)
	chanAt  time.Time     // the deadline last set on the channel
	chanSeq uint64        // intrSeq when it was set
}

// spinLimiter is what the poll role's spins ask of the process's spin
// limit (internal/spinlimit): a place among the spinners (Enter, Leave),
// whether goroutines wait for a P (Crowded), for whom a spin gives way,
// and the count of the process's waits (Waiting), past GOMAXPROCS of
// which no spin runs (ManyWaits). A variable so that tests can give the spins a limit of their own.
type spinLimiter interface {
	Enter() bool
	Leave()
	Crowded() bool
	Waiting(delta int32)
	ManyWaits() bool
}

var spinLimit spinLimiter = spinlimit.Process()

// SpinMisses is how many waits in a row the spin failed to catch (each
// then outlasting twice the budget asleep) before spinning turns off, so
// that an idle connection costs no CPU. While it is off, every SpinProbe-th
// wait spins anyway: a wait it catches turns spinning back on. Judging by
// the probe rather than by how long a sleep took matters where a sleep's
// own wake-up outlasts the budget (a loaded or emulated host): there no
// sleep ever looks short, though the peer answers within the budget.
const (
	SpinMisses = 4
	SpinProbe  = 16
)

// SpinStretch bounds how far learn stretches the spin past PollTime. 8:
// in the Soft-RoCE guest a 4 KiB round trip (200-400 us) is past 4x the
// default PollTime, and each wait then paid a sleep and a wake-up; medians
// of 5 rounds, one process, default Config: 387 -> 277 us (TCP 137).
const SpinStretch = 8

// Learn takes in how long a wait lasted (until completions came), so that
// the spin follows the peer: a peer that answers a little later than
// PollTime (a round trip slower than the budget, as in an emulated guest,
// or a server that takes a while) is still caught by the spin instead of
// paying a sleep and a wake-up every time, for at most spinStretch times
// PollTime of polling. A wait longer than that leaves the budget as it
// is: it was a miss, and spinMisses of them in a row turn spinning off,
// so a slow or idle peer costs at most spinMisses spins of the budget and
// then a probe every spinProbe-th wait. Kept, the budget lets a probe
// catch the peer again once it answers as it did: put back at PollTime,
// it did not where the answers that a spin catches take longer than
// PollTime and the ones a sleep waits for longer than the stretch. Two
// ends that both slept once stayed asleep. In the Soft-RoCE guest a 4 KiB
// ping-pong's answer takes 100-150 us while both ends spin and 400-500 us
// while both sleep; default Config, two processes, 8 runs each
// interleaved: 749 -> 420 us a round trip (rstream -T b 655 us).
func (p *PollState) Learn(w time.Duration) {
	most := SpinStretch * p.Spin
	if w > most {
		return
	}
	// Up at once (the next wait is caught), down gradually (one quick
	// answer does not cut the budget that the usual ones need).
	want := max(p.Spin, min(most, w+w/2))
	if want > p.Reach {
		p.Reach = want
	} else {
		p.Reach = (p.Reach + want) / 2
	}
}

// waited learns from a wait that began at began, on a connection that
// spins at all.
func (p *PollState) waited(began time.Time) {
	if p.Spin > 0 && !began.IsZero() {
		p.Learn(time.Since(began))
	}
}

// Configure sets the holder's spin from Config's PollTime and BusyPoll
// for a connection on the soft provider or not.
func (p *PollState) Configure(pollTime time.Duration, busyPoll, soft bool) {
	p.Spin = pollTime
	p.Reach = p.Spin
	// Soft's completions come from its transport, which a waiting caller
	// reads itself or, when none waits, a goroutine parked on the runtime
	// poller, which busy callers holding every P would starve.
	p.Busy = busyPoll && !soft
}

// TakeLocked takes the role if nobody holds it. Called with Mu held.
func (p *PollState) TakeLocked() bool {
	if p.Held || p.Claimed {
		return false
	}
	p.Held = true
	return true
}

// ReleaseLocked lets the role go, and reports whether callers wait (one of
// them is to take it over). Called with Mu held.
func (p *PollState) ReleaseLocked() (othersWait bool) {
	p.Held = false
	return p.Waiters > 0
}

// spinNext reports whether the holder's next wait spins before it sleeps:
// while spins catch completions, and every spinProbe-th wait once they
// stopped doing so.
func (p *PollState) spinNext() bool {
	if p.Spin <= 0 {
		return false
	}
	if p.Misses < SpinMisses {
		return true
	}
	if p.skipped++; p.skipped >= SpinProbe {
		p.skipped = 0
		return true
	}
	return false
}

// spinCaught takes in a spin, begun at began, that caught completions.
func (p *PollState) spinCaught(began time.Time) {
	p.caughtOne()
	p.waited(began)
}

func (p *PollState) caughtOne() {
	p.Caught++
	p.Misses, p.skipped = 0, 0
}

// channelSpun takes in a wait whose channel did the spinning (soft's):
// polled is the longest polling that what came ended, parked how long
// the wait slept after polling, zero if it never had to.
func (p *PollState) channelSpun(polled, parked time.Duration) {
	if parked == 0 {
		p.caughtOne()
		if polled > 0 {
			p.Learn(polled)
		}
		return
	}
	p.Sleeps++
	p.sleptAfterSpin(parked)
	p.Learn(p.Reach + parked)
}

// sleptAfterSpin takes in a sleep of d after a spin that caught nothing:
// a spin a little longer would have caught a short sleep.
func (p *PollState) sleptAfterSpin(d time.Duration) {
	if d <= 2*p.Reach {
		p.Misses = 0
	} else if p.Misses < SpinMisses {
		p.Misses++
	}
}

// pollKind is how the poll role's holder got its completions, from its
// counts before (sleeps, caught) and now.
func (p *PollState) pollKind(sleeps, caught uint64) connstats.WaitKind {
	switch {
	case p.Sleeps != sleeps:
		return connstats.WaitSlept
	case p.Caught != caught:
		return connstats.WaitSpun
	}
	return connstats.WaitHanded
}
