package core

import (
	"errors"
	"os"
	"runtime"
	"time"

	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/verbs"
)

// The poll role's work, for either wire (PollState, in pollrole.go, is its
// state): await and tryPoll, the holder's loop of polling, spinning and
// sleeping (pollRole, spinFor), and the wake-ups of the callers that wait.

// spinCheck is how many empty polls a spin makes between looks at the
// clock, the caller's deadline, Close and interrupts. A spin yields the
// processor every spinYield of spinning, so that other goroutines of a
// program with few Ps keep running. By time rather than by a count of
// polls, so that it means the same where a poll is slow: in a Soft-RoCE
// guest, yielding every 10 us made 4 KiB ping-pongs 1.6x faster than every
// 1 ms (a yield wakes an idle P's thread, and the kernel's work for the
// transfer gets the CPU sooner); natively it is about every 200 polls.
const (
	spinCheck = 16
	spinYield = 10 * time.Microsecond
)

// Poller is one call into the poll role of a connection of either wire:
// the parts of the connection it works on, and the wire's own steps.
type Poller struct {
	F *Conn
	E *Endpoint
	W PolledConn

	room bool // the caller is a writer waiting for room (awaitRoom)
}

// AwaitRoom is await for a Write that waits for room (send buffer,
// credits, send slots) while its data is in flight: the wait lasts as long
// as the peer takes to consume, the stream's own pace, so where the
// channel spins (soft) it does not (see spinningChannel).
func (r Poller) AwaitRoom() {
	r.room = true
	r.Await(r.F.SndReady, &r.F.WriteDL, false)
}

// PolledConn is what the poll role asks of a connection's wire.
type PolledConn interface {
	Handle(wcs []verbs.WC) // applies a batch of completions
	FailLocked(err error)  // records a failure and wakes every waiter
}

// Await makes completions arrive for a caller that cannot go on, and
// returns for it to look again. ready is the caller's channel, dl its
// deadline (nil: none); draining says the caller is Close's drain, which
// runs after ClosedCh is closed.
func (r Poller) Await(ready chan struct{}, dl *Deadline, draining bool) {
	began := r.F.WaitStart(dl)
	r.F.Mu.Lock()
	if r.F.Torn {
		r.F.Mu.Unlock()
		return
	}
	select {
	case <-ready:
		r.F.WaitedLocked(dl, began, connstats.WaitHanded)
		// What the caller waits for may have come since it looked: another
		// holder applied completions meanwhile (and poked ready, under mu).
		// Without this look, the caller could take the role with the CQ
		// already drained and sleep past what it waits for.
		r.F.Mu.Unlock()
		return
	default:
	}
	if !r.F.Poll.TakeLocked() {
		r.F.Poll.Waiters++
		r.F.Mu.Unlock()
		var dlc, closed chan struct{}
		if dl != nil {
			dlc = dl.Wait()
		}
		if !draining {
			closed = r.F.ClosedCh
		}
		select {
		case <-ready:
		case <-dlc:
		case <-closed:
		}
		r.F.Mu.Lock()
		r.F.Poll.Waiters--
		r.F.WaitedLocked(dl, began, connstats.WaitHanded)
		r.F.Mu.Unlock()
		return
	}
	spinOK := !r.room && r.F.AnswerDueLocked()
	r.F.Mu.Unlock()
	sleeps, caught := r.F.Poll.Sleeps, r.F.Poll.Caught
	r.pollRole(dl, draining, spinOK)
	r.F.Mu.Lock()
	othersWait := r.F.Poll.ReleaseLocked()
	r.F.WaitedLocked(dl, began, r.F.Poll.pollKind(sleeps, caught))
	// The role's counts, which only its holder touches, for Stats.
	st := r.F.Counters
	st.Spins, st.Caught, st.Refused, st.Sleeps = r.F.Poll.Spins, r.F.Poll.Caught, r.F.Poll.Refused, r.F.Poll.Sleeps
	select {
	case <-ready: // our own poke, from what we applied: the caller looks anyway
	default:
	}
	if othersWait {
		Poke(r.F.RcvReady)
		Poke(r.F.SndReady)
	}
	r.F.Mu.Unlock()
}

// maxPollBatches bounds one tryPoll: what a CQ of the deepest queues
// holds, so that completions arriving as fast as it applies them cannot
// keep the watch's tick from its other work.
const maxPollBatches = 64

// TryPoll applies the completions queued in the CQ, unless a caller holds
// the poll role (and will).
func (r Poller) TryPoll() {
	r.F.Mu.Lock()
	if r.F.Torn || !r.F.Poll.TakeLocked() {
		r.F.Mu.Unlock()
		return
	}
	r.F.Mu.Unlock()
	r.pollAll()
	r.F.Mu.Lock()
	if r.F.Poll.ReleaseLocked() {
		Poke(r.F.RcvReady)
		Poke(r.F.SndReady)
	}
	r.F.Mu.Unlock()
}

// pollAll applies everything that waits in the CQ, not one batch (a ping
// to answer may sit behind a queue's worth of notifications the program
// has not taken), up to maxPollBatches. The caller holds the role.
func (r Poller) pollAll() {
	for i := 0; i < maxPollBatches && r.pollBatch() == len(r.F.Poll.wcs); i++ {
	}
}

// Settle applies every completion the CQ holds and then, still holding
// the poll role, runs f under mu; then it wakes every waiter. So what came
// before an event on another channel (a disconnect's, from the CM) is
// applied before what f makes of it (the end of the stream): otherwise a
// holder asleep on the completion channel, woken by the event's wake-up
// before it polled, would leave the last data in the CQ while its caller
// already saw the end. A holder is interrupted and Settle takes the role
// when it lets go; meanwhile nobody else takes it.
func (r Poller) Settle(f func()) {
	r.F.Mu.Lock()
	if r.F.Poll.Held && !r.F.Torn {
		r.F.Poll.Claimed = true
		r.interrupt()
		for r.F.Poll.Held && !r.F.Torn {
			r.F.Mu.Unlock()
			runtime.Gosched()
			r.F.Mu.Lock()
		}
		r.F.Poll.Claimed = false
	}
	if !r.F.Torn {
		r.F.Poll.Held = true
		r.F.Mu.Unlock()
		r.pollAll()
		r.F.Mu.Lock()
		r.F.Poll.ReleaseLocked()
	}
	f()
	r.WakeLocked()
	r.F.Mu.Unlock()
}

// pollRole is the holder's work: return once completions were applied,
// the connection failed, or the caller should look again (its deadline,
// Close, an interrupt). spinOK says whether the wait may spin where the
// channel does the spinning (spinningChannel).
func (r Poller) pollRole(dl *Deadline, draining, spinOK bool) {
	if r.pollBatch() > 0 {
		return
	}
	// The process's spins keep to the count of its waits (ManyWaits),
	// soft's transports' polls among them.
	spinLimit.Waiting(1)
	defer spinLimit.Waiting(-1)
	p := &r.F.Poll
	if p.Busy {
		r.spinFor(dl, draining, 0)
		return
	}
	// A spinning channel times its own waits (only those it polls in).
	var began time.Time
	sc, chanSpins := r.E.CompCh.(spinningChannel)
	if p.Spin > 0 && !chanSpins {
		began = time.Now()
	}
	wantsSpin := (spinOK || !chanSpins) && p.spinNext()
	spun := wantsSpin && spinAllowed(chanSpins)
	if spun {
		p.Spins++
	} else if wantsSpin {
		p.Refused++
	}
	if spun && !chanSpins {
		res := r.spinFor(dl, draining, p.Reach)
		spinLimit.Leave()
		switch res {
		case spinCaught:
			p.spinCaught(began)
			return
		case spinLookAgain:
			return
		case spinGaveWay:
			spun = false // the sleep that follows says nothing of the spin
		}
	}
	armed := false
	for {
		if !armed {
			if err := r.E.CQ.ReqNotify(false); err != nil {
				r.fail(err)
				return
			}
			armed = true
			// Completions that arrived before arming produce no event.
			if r.pollBatch() > 0 {
				p.waited(began)
				return
			}
		}
		seq := r.F.Poll.intrSeq.Load()
		var at time.Time
		if dl != nil {
			var dlc chan struct{}
			dlc, at = dl.State()
			if IsClosed(dlc) || !at.IsZero() && !time.Now().Before(at) {
				return
			}
		}
		if !draining && IsClosed(r.F.ClosedCh) {
			return
		}
		if at != p.chanAt || seq != p.chanSeq {
			if err := r.E.CompCh.SetDeadline(at); err != nil {
				r.fail(err)
				return
			}
			p.chanAt, p.chanSeq = at, seq
			if r.F.Poll.intrSeq.Load() != seq {
				continue // interrupted meanwhile: look again
			}
		}
		var err error
		if spun && chanSpins {
			var polled, parked time.Duration
			_, polled, parked, err = sc.GetEventSpin(p.Reach)
			p.channelSpun(polled, parked)
			spun = false
		} else {
			var slept time.Time
			if spun {
				slept = time.Now()
			}
			p.Sleeps++
			_, err = r.E.CompCh.GetEvent()
			if spun {
				p.sleptAfterSpin(time.Since(slept))
				spun = false
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return // the caller's deadline, or an interrupt
		}
		if err != nil {
			r.fail(err)
			return
		}
		if p.Unacked++; p.Unacked >= 64 {
			r.E.CompCh.AckEvents(r.E.CQ, p.Unacked)
			p.Unacked = 0
		}
		armed = false
		if r.pollBatch() > 0 {
			p.waited(began)
			return
		}
	}
}

// spinningChannel is a completion channel whose waiter reads the transport
// itself (soft's): the spin is the channel's, polling the transport, for
// a CQ polled meanwhile would stay empty. There a wait spins only when it
// likely waits for an answer: the connection has sent data (or a
// rendezvous' descriptor or done) since it last received any, and the
// caller is not a writer waiting for room. Polling a socket costs a
// system call a look, and a reader that polls reads a stream as it
// trickles in, in more and smaller reads (each with its credit update)
// than one woken once a batch has landed: rdmaperf on soft's TCP path, 2
// CPUs, spinning in every wait against no spin: 64 B round trips 3.5x
// quicker, 1 MiB from and into Buffers 1.9x the throughput, but a 64 KiB
// copying stream 0.86x at 1.2x the CPU a message; with this rule the
// stream is as before and the others keep their gain (docs/design.md).
type spinningChannel interface {
	GetEventSpin(spin time.Duration) (cq verbs.CQ, polled, parked time.Duration, err error)
}

// spinAllowed asks the process's spin limit (spinLimit) whether a wait
// that would spin does: a spin of the poll role's own (not chanSpins)
// holds a place among the process's spinners until spinLimit.Leave. A
// channel's spin (soft's) is the channel's to limit: its shared-memory
// reader asks the limit itself, and its TCP path polls the socket between
// yields of the goroutine (runtime.Gosched), which gives the P to any
// goroutine waiting for one. (Skipping that poll while goroutines waited
// for a P cost a single connection's 64 B round trips on the TCP path
// 15 us -> 300-800 us at the median: what waited was the connection's
// own sending.)
func spinAllowed(chanSpins bool) bool {
	return chanSpins || spinLimit.Enter()
}

// spinResult is how a spin ended.
type spinResult int

const (
	spinTimedOut  spinResult = iota // the budget ran out: sleep
	spinCaught                      // completions applied
	spinLookAgain                   // the caller's deadline, Close or an interrupt
	spinGaveWay                     // goroutines wait for a P: sleep, giving ours to them
)

// spinFor polls the CQ until completions come, for at most budget (0:
// without end), looking every spinCheck polls at what must end a wait
// anyway, as the sleep does: the caller's deadline, Close, an interrupt.
func (r Poller) spinFor(dl *Deadline, draining bool, budget time.Duration) spinResult {
	seq := r.F.Poll.intrSeq.Load()
	var dlc chan struct{}
	var at time.Time
	if dl != nil {
		dlc, at = dl.State()
	}
	start := time.Now()
	yielded := start
	for i := 1; ; i++ {
		if r.pollBatch() > 0 {
			return spinCaught
		}
		if i%spinCheck != 0 {
			continue
		}
		if r.F.Poll.intrSeq.Load() != seq || IsClosed(dlc) || !draining && IsClosed(r.F.ClosedCh) {
			return spinLookAgain
		}
		now := time.Now()
		if !at.IsZero() && !now.Before(at) {
			return spinLookAgain
		}
		if budget > 0 && now.Sub(start) >= budget {
			return spinTimedOut
		}
		if now.Sub(yielded) >= spinYield {
			// A bounded spin gives way to goroutines that wait for a P,
			// and to more waits than Ps (BusyPoll's, which never sleeps,
			// yields to them instead).
			if budget > 0 && (spinLimit.Crowded() || spinLimit.ManyWaits()) {
				return spinGaveWay
			}
			runtime.Gosched()
			yielded = now
		}
	}
}

// pollBatch polls one batch of completions and has the wire apply it; a
// failed poll fails the connection. It returns how many it applied, or 1
// after a failure so that the caller looks at the connection again.
func (r Poller) pollBatch() int {
	n, err := r.E.CQ.Poll(r.F.Poll.wcs[:])
	if n > 0 {
		r.W.Handle(r.F.Poll.wcs[:n])
	}
	if err != nil {
		r.fail(err)
		return 1
	}
	return n
}

// fail records err as the connection's failure, unless it is closed.
func (r Poller) fail(err error) {
	r.F.Mu.Lock()
	if !r.F.Closed {
		r.W.FailLocked(err)
	}
	r.F.Mu.Unlock()
}

// interrupt makes the poll role's holder look again at once: a sleeping
// holder wakes (the channel's deadline moves into the past), and one about
// to sleep sees intrSeq move and does not. Called with Mu held.
func (r Poller) interrupt() {
	if r.E.CompCh == nil || r.F.Torn {
		return
	}
	r.F.Poll.intrSeq.Add(1)
	_ = r.E.CompCh.SetDeadline(time.Unix(1, 0))
}

// WakeLocked wakes every waiter, the poll role's holder included, to look
// at the connection again. Called with Mu held.
func (r Poller) WakeLocked() {
	Poke(r.F.RcvReady)
	Poke(r.F.SndReady)
	if r.F.Poll.Held {
		r.interrupt()
	}
}

// LookAgain makes a sleeping holder look again: at a new deadline, or at
// Close. (A caller waiting for the holder watches its deadline's channel,
// which is only ever replaced after it was closed, which woke that
// caller.)
func (r Poller) LookAgain() {
	r.F.Mu.Lock()
	if r.F.Poll.Held {
		r.interrupt()
	}
	r.F.Mu.Unlock()
}
