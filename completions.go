package rdma

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Completions are driven by the callers that need them. A Read without
// data, a Write without room, CloseWrite and Close's drain call await,
// and the first of them takes the poll role: on its own goroutine it polls
// the CQ, busy-polls a little while (pollState.spin), then arms the CQ and
// sleeps on the completion channel, which parks on the runtime poller
// (soft: reads its QP's transport), and applies what it polls. So on the
// latency path the completion reaches the goroutine that wants it with no
// hand-off. A caller that finds the role taken waits on its own channel
// (rcvReady, sndReady), which the holder pokes when what it applied
// concerns that side; when the holder lets go with others waiting, it
// pokes them so that one takes the role over.
//
// The holder's sleep ends with an event, or with the channel's deadline:
// the holder's own deadline, or one moved into the past by interrupt,
// which Close, a deadline change and a failure found elsewhere use to make
// the holder look again.

// pollState is the poll role: who holds it and who waits (under the
// connection's mu), the interrupt sequence (atomic), and the holder's own
// state, which only the holder (or releaseVerbs, once nobody holds the
// role) touches: the batch, the events to acknowledge, and how it spins.
type pollState struct {
	waiters int           // callers waiting for the holder (under mu)
	intrSeq atomic.Uint64 // moved by interrupt

	// One poll's batch. 16: every connection carries it (640 bytes; 32
	// put a Conn in the 2688-byte size class instead of 2048), and a
	// batch of 16 already takes a poll's fixed cost off each completion.
	wcs     [16]verbs.WC
	unacked int           // completion events not yet acknowledged
	spin    time.Duration // busy-poll budget before sleeping (PollTime)
	reach   time.Duration // the budget a spin gets: spin, stretched by learn (never less)
	busy    bool          // Config.BusyPoll: poll until something arrives, never sleep
	held    bool          // a caller holds the role (under mu)
	claimed bool          // settle waits to take the role: nobody else takes it (under mu)
	misses  int           // waits in a row that a spin did not catch
	skipped int           // waits without a spin since spinning turned off
	spins   uint64        // spins begun (for tests)
	sleeps  uint64        // sleeps on the channel (for tests)
	caught  uint64        // spins that caught completions (stats.go)
	chanAt  time.Time     // the deadline last set on the channel
	chanSeq uint64        // intrSeq when it was set
}

// spinMisses is how many waits in a row the spin failed to catch (each
// then outlasting twice the budget asleep) before spinning turns off, so
// that an idle connection costs no CPU. While it is off, every spinProbe-th
// wait spins anyway: a wait it catches turns spinning back on. Judging by
// the probe rather than by how long a sleep took matters where a sleep's
// own wake-up outlasts the budget (a loaded or emulated host): there no
// sleep ever looks short, though the peer answers within the budget.
const (
	spinMisses = 4
	spinProbe  = 16
)

// spinStretch bounds how far learn stretches the spin past PollTime. 8:
// in the Soft-RoCE guest a 4 KiB round trip (200-400 us) is past 4x the
// default PollTime, and each wait then paid a sleep and a wake-up; medians
// of 5 rounds, one process, default Config: 387 -> 277 us (TCP 137).
const spinStretch = 8

// learn takes in how long a wait lasted (until completions came), so that
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
func (p *pollState) learn(w time.Duration) {
	most := spinStretch * p.spin
	if w > most {
		return
	}
	// Up at once (the next wait is caught), down gradually (one quick
	// answer does not cut the budget that the usual ones need).
	want := max(p.spin, min(most, w+w/2))
	if want > p.reach {
		p.reach = want
	} else {
		p.reach = (p.reach + want) / 2
	}
}

// waited learns from a wait that began at began, on a connection that
// spins at all.
func (p *pollState) waited(began time.Time) {
	if p.spin > 0 && !began.IsZero() {
		p.learn(time.Since(began))
	}
}

// configure sets the holder's spin from cfg (PollTime, BusyPoll) for a
// connection on provider.
func (p *pollState) configure(cfg *Config, provider string) {
	p.spin = cfg.pollTime()
	p.reach = p.spin
	// Soft's completions come from its transport, which a waiting caller
	// reads itself or, when none waits, a goroutine parked on the runtime
	// poller, which busy callers holding every P would starve.
	p.busy = cfg.busyPoll() && provider != ProviderSoft
}

// takeLocked takes the role if nobody holds it. Called with mu held.
func (p *pollState) takeLocked() bool {
	if p.held || p.claimed {
		return false
	}
	p.held = true
	return true
}

// releaseLocked lets the role go, and reports whether callers wait (one of
// them is to take it over). Called with mu held.
func (p *pollState) releaseLocked() (othersWait bool) {
	p.held = false
	return p.waiters > 0
}

// spinNext reports whether the holder's next wait spins before it sleeps:
// while spins catch completions, and every spinProbe-th wait once they
// stopped doing so.
func (p *pollState) spinNext() bool {
	if p.spin <= 0 {
		return false
	}
	if p.misses < spinMisses {
		return true
	}
	if p.skipped++; p.skipped >= spinProbe {
		p.skipped = 0
		return true
	}
	return false
}

// spinCaught takes in a spin, begun at began, that caught completions.
func (p *pollState) spinCaught(began time.Time) {
	p.caughtOne()
	p.waited(began)
}

func (p *pollState) caughtOne() {
	p.caught++
	p.misses, p.skipped = 0, 0
}

// channelSpun takes in a wait whose channel did the spinning (soft's):
// polled is the longest polling that what came ended, parked how long
// the wait slept after polling, zero if it never had to.
func (p *pollState) channelSpun(polled, parked time.Duration) {
	if parked == 0 {
		p.caughtOne()
		if polled > 0 {
			p.learn(polled)
		}
		return
	}
	p.sleeps++
	p.sleptAfterSpin(parked)
	p.learn(p.reach + parked)
}

// sleptAfterSpin takes in a sleep of d after a spin that caught nothing:
// a spin a little longer would have caught a short sleep.
func (p *pollState) sleptAfterSpin(d time.Duration) {
	if d <= 2*p.reach {
		p.misses = 0
	} else if p.misses < spinMisses {
		p.misses++
	}
}

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

// poller is one call into the poll role of a connection of either wire:
// the parts of the connection it works on, and the wire's own steps.
type poller struct {
	f *connFace
	e *endpoint
	p *pollState
	w polledConn

	room bool // the caller is a writer waiting for room (awaitRoom)
}

// awaitRoom is await for a Write that waits for room (send buffer,
// credits, send slots) while its data is in flight: the wait lasts as long
// as the peer takes to consume, the stream's own pace, so where the
// channel spins (soft) it does not (see spinningChannel).
func (r poller) awaitRoom() {
	r.room = true
	r.await(r.f.sndReady, &r.f.wdl, false)
}

// polledConn is what the poll role asks of a connection's wire.
type polledConn interface {
	handle(wcs []verbs.WC) // applies a batch of completions
	failLocked(err error)  // records a failure and wakes every waiter
}

func (c *Conn) poller() poller { return poller{f: &c.connFace, e: &c.endpoint, p: &c.poll, w: c} }

// await makes completions arrive (the poll role) for a caller that cannot
// go on; see poller.await.
func (c *Conn) await(ready chan struct{}, dl *deadline, draining bool) {
	c.poller().await(ready, dl, draining)
}

// awaitRoom is await for a Write waiting for room; see poller.awaitRoom.
func (c *Conn) awaitRoom() { c.poller().awaitRoom() }

// tryPoll applies the completions queued, unless the role is held; see
// poller.tryPoll.
func (c *Conn) tryPoll() { c.poller().tryPoll() }

// await makes completions arrive for a caller that cannot go on, and
// returns for it to look again. ready is the caller's channel, dl its
// deadline (nil: none); draining says the caller is Close's drain, which
// runs after closedCh is closed.
func (r poller) await(ready chan struct{}, dl *deadline, draining bool) {
	began := r.f.waitStart(dl) // stats.go
	r.f.mu.Lock()
	if r.f.torn {
		r.f.mu.Unlock()
		return
	}
	select {
	case <-ready:
		r.f.waitedLocked(dl, began, waitHanded)
		// What the caller waits for may have come since it looked: another
		// holder applied completions meanwhile (and poked ready, under mu).
		// Without this look, the caller could take the role with the CQ
		// already drained and sleep past what it waits for.
		r.f.mu.Unlock()
		return
	default:
	}
	if !r.p.takeLocked() {
		r.p.waiters++
		r.f.mu.Unlock()
		var dlc, closed chan struct{}
		if dl != nil {
			dlc = dl.wait()
		}
		if !draining {
			closed = r.f.closedCh
		}
		select {
		case <-ready:
		case <-dlc:
		case <-closed:
		}
		r.f.mu.Lock()
		r.p.waiters--
		r.f.waitedLocked(dl, began, waitHanded)
		r.f.mu.Unlock()
		return
	}
	spinOK := !r.room && r.f.answerDueLocked()
	r.f.mu.Unlock()
	sleeps, caught := r.p.sleeps, r.p.caught
	r.pollRole(dl, draining, spinOK)
	r.f.mu.Lock()
	othersWait := r.p.releaseLocked()
	r.f.waitedLocked(dl, began, r.p.pollKind(sleeps, caught))
	// The role's counts, which only its holder touches, for Stats.
	st := r.f.stats
	st.spins, st.caught, st.sleeps = r.p.spins, r.p.caught, r.p.sleeps
	select {
	case <-ready: // our own poke, from what we applied: the caller looks anyway
	default:
	}
	if othersWait {
		poke(r.f.rcvReady)
		poke(r.f.sndReady)
	}
	r.f.mu.Unlock()
}

// maxPollBatches bounds one tryPoll: what a CQ of the deepest queues
// holds, so that completions arriving as fast as it applies them cannot
// keep the watch's tick from its other work.
const maxPollBatches = 64

// tryPoll applies the completions queued in the CQ, unless a caller holds
// the poll role (and will).
func (r poller) tryPoll() {
	r.f.mu.Lock()
	if r.f.torn || !r.p.takeLocked() {
		r.f.mu.Unlock()
		return
	}
	r.f.mu.Unlock()
	r.pollAll()
	r.f.mu.Lock()
	if r.p.releaseLocked() {
		poke(r.f.rcvReady)
		poke(r.f.sndReady)
	}
	r.f.mu.Unlock()
}

// pollAll applies everything that waits in the CQ, not one batch (a ping
// to answer may sit behind a queue's worth of notifications the program
// has not taken), up to maxPollBatches. The caller holds the role.
func (r poller) pollAll() {
	for i := 0; i < maxPollBatches && r.pollBatch() == len(r.p.wcs); i++ {
	}
}

// settle applies every completion the CQ holds and then, still holding
// the poll role, runs f under mu; then it wakes every waiter. So what came
// before an event on another channel (a disconnect's, from the CM) is
// applied before what f makes of it (the end of the stream): otherwise a
// holder asleep on the completion channel, woken by the event's wake-up
// before it polled, would leave the last data in the CQ while its caller
// already saw the end. A holder is interrupted and settle takes the role
// when it lets go; meanwhile nobody else takes it.
func (r poller) settle(f func()) {
	r.f.mu.Lock()
	if r.p.held && !r.f.torn {
		r.p.claimed = true
		r.interrupt()
		for r.p.held && !r.f.torn {
			r.f.mu.Unlock()
			runtime.Gosched()
			r.f.mu.Lock()
		}
		r.p.claimed = false
	}
	if !r.f.torn {
		r.p.held = true
		r.f.mu.Unlock()
		r.pollAll()
		r.f.mu.Lock()
		r.p.releaseLocked()
	}
	f()
	r.wakeLocked()
	r.f.mu.Unlock()
}

// pollRole is the holder's work: return once completions were applied,
// the connection failed, or the caller should look again (its deadline,
// Close, an interrupt). spinOK says whether the wait may spin where the
// channel does the spinning (spinningChannel).
func (r poller) pollRole(dl *deadline, draining, spinOK bool) {
	if r.pollBatch() > 0 {
		return
	}
	p := r.p
	if p.busy {
		r.spinFor(dl, draining, 0)
		return
	}
	// A spinning channel times its own waits (only those it polls in).
	var began time.Time
	sc, chanSpins := r.e.cch.(spinningChannel)
	if p.spin > 0 && !chanSpins {
		began = time.Now()
	}
	spun := (spinOK || !chanSpins) && p.spinNext()
	if spun {
		p.spins++
	}
	if spun && !chanSpins {
		switch r.spinFor(dl, draining, p.reach) {
		case spinCaught:
			p.spinCaught(began)
			return
		case spinLookAgain:
			return
		}
	}
	armed := false
	for {
		if !armed {
			if err := r.e.cq.ReqNotify(false); err != nil {
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
		seq := r.p.intrSeq.Load()
		var at time.Time
		if dl != nil {
			var dlc chan struct{}
			dlc, at = dl.state()
			if isClosed(dlc) || !at.IsZero() && !time.Now().Before(at) {
				return
			}
		}
		if !draining && isClosed(r.f.closedCh) {
			return
		}
		if at != p.chanAt || seq != p.chanSeq {
			if err := r.e.cch.SetDeadline(at); err != nil {
				r.fail(err)
				return
			}
			p.chanAt, p.chanSeq = at, seq
			if r.p.intrSeq.Load() != seq {
				continue // interrupted meanwhile: look again
			}
		}
		var err error
		if spun && chanSpins {
			var polled, parked time.Duration
			_, polled, parked, err = sc.GetEventSpin(p.reach)
			p.channelSpun(polled, parked)
			spun = false
		} else {
			var slept time.Time
			if spun {
				slept = time.Now()
			}
			p.sleeps++
			_, err = r.e.cch.GetEvent()
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
		if p.unacked++; p.unacked >= 64 {
			r.e.cch.AckEvents(r.e.cq, p.unacked)
			p.unacked = 0
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

// spinResult is how a spin ended.
type spinResult int

const (
	spinTimedOut  spinResult = iota // the budget ran out: sleep
	spinCaught                      // completions applied
	spinLookAgain                   // the caller's deadline, Close or an interrupt
)

// spinFor polls the CQ until completions come, for at most budget (0:
// without end), looking every spinCheck polls at what must end a wait
// anyway, as the sleep does: the caller's deadline, Close, an interrupt.
func (r poller) spinFor(dl *deadline, draining bool, budget time.Duration) spinResult {
	seq := r.p.intrSeq.Load()
	var dlc chan struct{}
	var at time.Time
	if dl != nil {
		dlc, at = dl.state()
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
		if r.p.intrSeq.Load() != seq || isClosed(dlc) || !draining && isClosed(r.f.closedCh) {
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
			runtime.Gosched()
			yielded = now
		}
	}
}

// pollBatch polls one batch of completions and has the wire apply it; a
// failed poll fails the connection. It returns how many it applied, or 1
// after a failure so that the caller looks at the connection again.
func (r poller) pollBatch() int {
	n, err := r.e.cq.Poll(r.p.wcs[:])
	if n > 0 {
		r.w.handle(r.p.wcs[:n])
	}
	if err != nil {
		r.fail(err)
		return 1
	}
	return n
}

// fail records err as the connection's failure, unless it is closed.
func (r poller) fail(err error) {
	r.f.mu.Lock()
	if !r.f.closed {
		r.w.failLocked(err)
	}
	r.f.mu.Unlock()
}

// interrupt makes the poll role's holder look again at once: a sleeping
// holder wakes (the channel's deadline moves into the past), and one about
// to sleep sees intrSeq move and does not. Called with mu held.
func (r poller) interrupt() {
	if r.e.cch == nil || r.f.torn {
		return
	}
	r.p.intrSeq.Add(1)
	_ = r.e.cch.SetDeadline(time.Unix(1, 0))
}

// wakeLocked wakes every waiter, the poll role's holder included, to look
// at the connection again. Called with mu held.
func (r poller) wakeLocked() {
	poke(r.f.rcvReady)
	poke(r.f.sndReady)
	if r.p.held {
		r.interrupt()
	}
}

// lookAgain makes a sleeping holder look again: at a new deadline, or at
// Close. (A caller waiting for the holder watches its deadline's channel,
// which is only ever replaced after it was closed, which woke that
// caller.)
func (r poller) lookAgain() {
	r.f.mu.Lock()
	if r.p.held {
		r.interrupt()
	}
	r.f.mu.Unlock()
}

// handle applies a batch of completions.
func (c *Conn) handle(wcs []verbs.WC) {
	var rcvChanged, sndChanged bool
	var perr error
	reposts, held := 0, 0
	c.mu.Lock()
	for i := range wcs {
		wc := &wcs[i]
		if wc.WRID&recvWRID != 0 {
			c.recvPosted--
			rcvChanged = true
			if wc.Status != verbs.WCSuccess {
				c.failLocked(wcError(wc.Status))
				continue
			}
			reposts++
			if perr == nil && c.err == nil {
				perr = c.recvLocked(wc, &sndChanged, &held)
			}
			continue
		}
		end, op, ok := c.sq.complete(wc.WRID)
		if !ok {
			c.failLocked(errStraySend)
			continue
		}
		c.sb.retire(end)
		if op != nil {
			op.status, op.done = wc.Status, true
		}
		sndChanged = true
		if wc.Status != verbs.WCSuccess {
			c.failLocked(wcError(wc.Status))
		}
	}
	if perr != nil {
		c.failLocked(perr)
	}
	c.retireSendLocked() // ringgrowth.go
	c.received += uint64(reposts)
	c.repostDue += reposts
	c.repostHeld += held
	// The credit rule (internal/stream/credits.go) says when receives go
	// back and credit with them: a notification's receive is credited
	// once the program takes it (notesLen hold theirs).
	starved := c.rx.Starved(c.recvPosted, c.notesLen)
	if stream.RepostNow(c.repostDue, c.repostBatch, starved) && c.err == nil && !c.torn {
		if err := c.postRecvs(c.repostDue); err != nil {
			c.failLocked(err)
		} else {
			c.recvPosted += c.repostDue
			// Only a posted receive is credited to the peer (so a batch
			// waiting here is never written to), and a notification's once
			// it is taken.
			c.rx.Owed += c.repostDue - c.repostHeld
			c.repostDue, c.repostHeld = 0, 0
		}
	}
	c.creditLocked(starved)
	if c.rndvDoneDue {
		c.sendRndvDoneLocked() // rndv.go
	}
	if c.pongDue {
		c.pongLocked()
	}
	if rcvChanged {
		poke(c.rcvReady)
	}
	if sndChanged {
		poke(c.sndReady)
	}
	c.unlockSubmit()
	if perr != nil {
		// Tell the peer: it gets a disconnect, we keep our error.
		_ = c.id.Disconnect()
	}
}

// recvLocked applies one message from the peer; the stream's rules check
// every value in it: a peer that breaks them gets its connection failed,
// nothing more.
func (c *Conn) recvLocked(wc *verbs.WC, sndChanged *bool, held *int) error {
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
		return breachError(stream.ErrNoImm)
	}
	kind, err := stream.Receive(&c.rx, &c.tx, wc.Imm, wc.ByteLen)
	if err != nil {
		return breachError(err)
	}
	switch kind {
	case stream.KindData:
		c.stats.msgsRecv++
		c.heardLocked()
		if len(c.ring) < c.cfg.RingSize {
			c.offerRingLocked() // ringgrowth.go
		}
	case stream.KindDataMoved:
		c.stats.msgsRecv++
		c.heardLocked()
		c.ringMovedLocked()
	case stream.KindRing:
		msg, err := stream.ParseRingMsg(c.mailbox())
		if err == nil {
			err = c.tx.Offer(msg)
		}
		if err != nil {
			return breachError(err)
		}
		*sndChanged = true
	case stream.KindCredit:
		*sndChanged = true
	case stream.KindRndvDone:
		*sndChanged = true
		c.heardLocked()
	case stream.KindRndv:
		if err := c.rx.TakeRndv(c.mailbox()[stream.RndvMsgAt:]); err != nil {
			return breachError(err)
		}
		c.heardLocked()
		c.stats.rndvRecv++
	case stream.KindNotify:
		if !c.noteRoomLocked() {
			return breachError(errNotifyOverflow)
		}
		c.notes[(c.notesHead+c.notesLen)%len(c.notes)] = notification{value: stream.NotifyValue(wc.Imm), n: wc.ByteLen}
		c.notesLen++
		*held++
	case stream.KindPing:
		c.stats.pingsRecv++
		c.pongDue = true
	case stream.KindPong:
		c.stats.pongsRecv++
	}
	return nil
}

// wcError turns a failed completion into the connection's error.
func wcError(s verbs.WCStatus) error {
	switch s {
	case verbs.WCWRFlushErr:
		return errReset
	case verbs.WCRetryExcErr:
		return errRetry
	case verbs.WCRNRRetryExcErr:
		return errRNR
	case verbs.WCRemAccessErr:
		return errRemoteAccess
	}
	return &connError{"work completion failed: " + s.String(), syscall.EIO}
}

// failLocked records why the connection failed (the first reason wins) and
// wakes every waiter.
func (c *Conn) failLocked(err error) {
	if c.err == nil {
		c.err = err
		c.logFailure(err) // debuglog.go
	}
	c.poller().wakeLocked()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

var errStraySend = &connError{"completion for a send that is not outstanding", syscall.EIO}

const recvWRID = 1 << 63 // set in the WR id of every receive
