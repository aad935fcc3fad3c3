package core

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// The poll role is held by one caller at a time; letting it go says
// whether callers wait for it.
func TestPollRoleTakeRelease(t *testing.T) {
	var p PollState
	assert.True(t, p.TakeLocked())
	assert.False(t, p.TakeLocked(), "held")
	assert.False(t, p.ReleaseLocked(), "nobody waits")
	assert.True(t, p.TakeLocked(), "free again")
	p.Waiters = 2
	assert.True(t, p.ReleaseLocked(), "callers wait: one takes it over")
	assert.False(t, p.Held)
}

// A connection without PollTime never spins; one with it spins until
// spinMisses spins in a row missed, then every spinProbe-th wait, and a
// spin that catches completions turns spinning back on.
func TestPollRoleSpinDecision(t *testing.T) {
	var p PollState
	assert.False(t, p.spinNext(), "no PollTime")

	p.Spin, p.Reach = 10*time.Microsecond, 10*time.Microsecond
	for range SpinMisses {
		assert.True(t, p.spinNext())
		p.sleptAfterSpin(time.Second) // a long sleep: the spin missed
	}
	assert.Equal(t, SpinMisses, p.Misses)
	for i := 1; i < SpinProbe; i++ {
		assert.False(t, p.spinNext(), "wait %d after spinning turned off", i)
	}
	assert.True(t, p.spinNext(), "the probe")
	p.spinCaught(time.Now())
	assert.Zero(t, p.Misses)
	assert.Equal(t, uint64(1), p.Caught)
	assert.True(t, p.spinNext(), "spinning is back on")
}

// A sleep short enough for a spin a little longer to have caught it
// counts as no miss.
func TestPollRoleShortSleep(t *testing.T) {
	p := PollState{Spin: 10 * time.Microsecond, Reach: 10 * time.Microsecond, Misses: 2}
	p.sleptAfterSpin(15 * time.Microsecond)
	assert.Zero(t, p.Misses)
	p.Misses = SpinMisses
	p.sleptAfterSpin(time.Second)
	assert.Equal(t, SpinMisses, p.Misses, "misses stay at their bound")
}

// The spin's budget follows the peer up to spinStretch times PollTime at
// once, comes down gradually, and stays where it is after a wait longer
// than that (a miss, which spinMisses in a row turn spinning off).
func TestPollRoleLearn(t *testing.T) {
	spin := 10 * time.Microsecond
	p := PollState{Spin: spin, Reach: spin}
	p.Learn(20 * time.Microsecond)
	assert.Equal(t, 30*time.Microsecond, p.Reach, "up at once, with half again as margin")
	p.Learn(time.Microsecond)
	assert.Equal(t, 20*time.Microsecond, p.Reach, "down halfway")
	p.Learn(70 * time.Microsecond)
	assert.Equal(t, SpinStretch*spin, p.Reach, "no more than spinStretch times PollTime")
	p.Learn(SpinStretch*spin + 1)
	assert.Equal(t, SpinStretch*spin, p.Reach, "a slow answer leaves the budget")
}

// Once spins keep missing, spinning turns off, and the probe spins with
// the budget the peer's answers needed before: a peer that answers as it
// did (both ends spinning again) is caught, where a probe of PollTime
// alone would miss it for good.
func TestPollRoleProbeKeepsTheBudget(t *testing.T) {
	spin := 10 * time.Microsecond
	p := PollState{Spin: spin, Reach: spin}
	p.Learn(50 * time.Microsecond) // the peer answered in 50 us
	learned := p.Reach
	require.Greater(t, learned, 50*time.Microsecond)
	for range SpinMisses { // then the peer slept: long waits
		require.True(t, p.spinNext())
		p.sleptAfterSpin(time.Second)
		p.Learn(time.Second)
	}
	for i := 1; i < SpinProbe; i++ {
		require.False(t, p.spinNext())
	}
	require.True(t, p.spinNext(), "the probe")
	assert.Equal(t, learned, p.Reach, "the probe spins with the budget that caught the peer")
}

// emptyCQ is a CQ that never has a completion.
type emptyCQ struct{}

func (emptyCQ) Poll([]verbs.WC) (int, error) { return 0, nil }
func (emptyCQ) ReqNotify(bool) error         { return nil }
func (emptyCQ) Channel() verbs.CompChannel   { return nil }
func (emptyCQ) Cap() int                     { return 16 }
func (emptyCQ) Destroy() error               { return nil }

// newEmptyPoller is the poll role of a connection whose CQ stays empty.
func newEmptyPoller() Poller {
	return Poller{F: &Conn{ClosedCh: make(chan struct{})}, E: &Endpoint{CQ: emptyCQ{}}}
}

// testSpinLimit is a spin limit that a test sets: whether Enter refuses
// and what Crowded answers; it counts the places asked for and left.
type testSpinLimit struct {
	refuse          bool
	crowded, many   atomic.Bool
	entered, left   int
	waits, mostWait atomic.Int32
}

func (l *testSpinLimit) Enter() bool     { l.entered++; return !l.refuse }
func (l *testSpinLimit) Leave()          { l.left++ }
func (l *testSpinLimit) Crowded() bool   { return l.crowded.Load() }
func (l *testSpinLimit) ManyWaits() bool { return l.many.Load() }
func (l *testSpinLimit) Waiting(delta int32) {
	if n := l.waits.Add(delta); n > l.mostWait.Load() {
		l.mostWait.Store(n)
	}
}

// useSpinLimit gives the poll role's spins l until the test ends.
func useSpinLimit(t *testing.T, l spinLimiter) {
	prev := spinLimit
	spinLimit = l
	t.Cleanup(func() { spinLimit = prev })
}

// A spin with a budget gives way (and the wait sleeps) as soon as
// goroutines wait for a P, long before its budget; without them it runs
// its budget out. BusyPoll's spin, which never sleeps, does not give way:
// it ends as any wait does (here an interrupt).
func TestSpinGivesWayWhenCrowded(t *testing.T) {
	l := &testSpinLimit{}
	useSpinLimit(t, l)
	r := newEmptyPoller()

	began := time.Now()
	assert.Equal(t, spinTimedOut, r.spinFor(nil, true, 20*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(began), 20*time.Millisecond, "nobody waits for a P: the whole budget")

	l.crowded.Store(true)
	began = time.Now()
	assert.Equal(t, spinGaveWay, r.spinFor(nil, true, time.Second))
	assert.Less(t, time.Since(began), 500*time.Millisecond, "gave way long before the budget")

	go func() {
		time.Sleep(20 * time.Millisecond)
		r.F.Poll.intrSeq.Add(1)
	}()
	assert.Equal(t, spinLookAgain, r.spinFor(nil, true, 0), "BusyPoll: polled on until interrupted")
}

// The poll role's own spin takes a place among the process's spinners,
// and a wait without one sleeps; a channel's spin (soft's, which limits
// its own) takes none.
func TestSpinAllowed(t *testing.T) {
	l := &testSpinLimit{}
	useSpinLimit(t, l)
	assert.True(t, spinAllowed(false))
	assert.Equal(t, 1, l.entered)
	l.refuse = true
	assert.False(t, spinAllowed(false), "no place among the spinners")
	l.crowded.Store(true)
	assert.True(t, spinAllowed(true), "the channel's spin is the channel's to limit")
	assert.Equal(t, 2, l.entered, "a channel's spin takes no place")
}

// A spin with a budget gives way as soon as the process's waits outnumber
// its Ps, as it does for goroutines waiting for a P.
func TestSpinGivesWayToManyWaits(t *testing.T) {
	l := &testSpinLimit{}
	useSpinLimit(t, l)
	r := newEmptyPoller()
	l.many.Store(true)
	began := time.Now()
	assert.Equal(t, spinGaveWay, r.spinFor(nil, true, time.Second))
	assert.Less(t, time.Since(began), 500*time.Millisecond, "gave way long before the budget")
}

// deadlineChannel is a completion channel without events: GetEvent
// returns when its deadline passes, and notes the process's waits that
// the spin limit counted meanwhile.
type deadlineChannel struct {
	l       *testSpinLimit
	at      time.Time
	waiting int32
}

func (c *deadlineChannel) GetEvent() (verbs.CQ, error) {
	c.waiting = c.l.waits.Load()
	time.Sleep(time.Until(c.at))
	return nil, os.ErrDeadlineExceeded
}
func (c *deadlineChannel) SetDeadline(t time.Time) error { c.at = t; return nil }
func (c *deadlineChannel) AckEvents(verbs.CQ, int)       {}
func (c *deadlineChannel) Close() error                  { return nil }

// The poll role's holder counts as one of the process's waits while it
// waits for completions (which ManyWaits weighs), and no longer after.
func TestPollRoleCountsItsWait(t *testing.T) {
	l := &testSpinLimit{}
	useSpinLimit(t, l)
	r := newEmptyPoller()
	ch := &deadlineChannel{l: l}
	r.E.CompCh = ch
	dl := new(Deadline)
	*dl = MakeDeadline()
	dl.Set(time.Now().Add(5 * time.Millisecond))
	r.pollRole(dl, true, false)
	assert.Equal(t, int32(1), ch.waiting, "counted while it slept")
	assert.Zero(t, l.waits.Load(), "uncounted once it returned")
}

// A wait that would spin counts the spin it began (Spins) or, when the
// process's spin limit refused it and it slept at once, the refusal
// (Refused); a role without a spin budget counts neither.
func TestPollRoleCountsRefusedSpins(t *testing.T) {
	l := &testSpinLimit{}
	useSpinLimit(t, l)
	wait := func(spin time.Duration) (spins, refused uint64) {
		r := newEmptyPoller()
		r.E.CompCh = &deadlineChannel{l: l}
		r.F.Poll.Spin, r.F.Poll.Reach = spin, spin
		dl := new(Deadline)
		*dl = MakeDeadline()
		dl.Set(time.Now().Add(5 * time.Millisecond))
		r.pollRole(dl, true, false)
		return r.F.Poll.Spins, r.F.Poll.Refused
	}

	spins, refused := wait(time.Millisecond)
	assert.Equal(t, [2]uint64{1, 0}, [2]uint64{spins, refused}, "the limit let the spin begin")
	l.refuse = true
	spins, refused = wait(time.Millisecond)
	assert.Equal(t, [2]uint64{0, 1}, [2]uint64{spins, refused}, "the limit refused it")
	spins, refused = wait(0)
	assert.Equal(t, [2]uint64{0, 0}, [2]uint64{spins, refused}, "no budget: nothing to refuse")
}
