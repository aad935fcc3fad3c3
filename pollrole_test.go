package rdma

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The poll role is held by one caller at a time; letting it go says
// whether callers wait for it.
func TestPollRoleTakeRelease(t *testing.T) {
	var p pollState
	assert.True(t, p.takeLocked())
	assert.False(t, p.takeLocked(), "held")
	assert.False(t, p.releaseLocked(), "nobody waits")
	assert.True(t, p.takeLocked(), "free again")
	p.waiters = 2
	assert.True(t, p.releaseLocked(), "callers wait: one takes it over")
	assert.False(t, p.held)
}

// A connection without PollTime never spins; one with it spins until
// spinMisses spins in a row missed, then every spinProbe-th wait, and a
// spin that catches completions turns spinning back on.
func TestPollRoleSpinDecision(t *testing.T) {
	var p pollState
	assert.False(t, p.spinNext(), "no PollTime")

	p.spin, p.reach = 10*time.Microsecond, 10*time.Microsecond
	for range spinMisses {
		assert.True(t, p.spinNext())
		p.sleptAfterSpin(time.Second) // a long sleep: the spin missed
	}
	assert.Equal(t, spinMisses, p.misses)
	for i := 1; i < spinProbe; i++ {
		assert.False(t, p.spinNext(), "wait %d after spinning turned off", i)
	}
	assert.True(t, p.spinNext(), "the probe")
	p.spinCaught(time.Now())
	assert.Zero(t, p.misses)
	assert.Equal(t, uint64(1), p.caught)
	assert.True(t, p.spinNext(), "spinning is back on")
}

// A sleep short enough for a spin a little longer to have caught it
// counts as no miss.
func TestPollRoleShortSleep(t *testing.T) {
	p := pollState{spin: 10 * time.Microsecond, reach: 10 * time.Microsecond, misses: 2}
	p.sleptAfterSpin(15 * time.Microsecond)
	assert.Zero(t, p.misses)
	p.misses = spinMisses
	p.sleptAfterSpin(time.Second)
	assert.Equal(t, spinMisses, p.misses, "misses stay at their bound")
}

// The spin's budget follows the peer up to spinStretch times PollTime at
// once, comes down gradually, and stays where it is after a wait longer
// than that (a miss, which spinMisses in a row turn spinning off).
func TestPollRoleLearn(t *testing.T) {
	spin := 10 * time.Microsecond
	p := pollState{spin: spin, reach: spin}
	p.learn(20 * time.Microsecond)
	assert.Equal(t, 30*time.Microsecond, p.reach, "up at once, with half again as margin")
	p.learn(time.Microsecond)
	assert.Equal(t, 20*time.Microsecond, p.reach, "down halfway")
	p.learn(70 * time.Microsecond)
	assert.Equal(t, spinStretch*spin, p.reach, "no more than spinStretch times PollTime")
	p.learn(spinStretch*spin + 1)
	assert.Equal(t, spinStretch*spin, p.reach, "a slow answer leaves the budget")
}

// Once spins keep missing, spinning turns off, and the probe spins with
// the budget the peer's answers needed before: a peer that answers as it
// did (both ends spinning again) is caught, where a probe of PollTime
// alone would miss it for good.
func TestPollRoleProbeKeepsTheBudget(t *testing.T) {
	spin := 10 * time.Microsecond
	p := pollState{spin: spin, reach: spin}
	p.learn(50 * time.Microsecond) // the peer answered in 50 us
	learned := p.reach
	require.Greater(t, learned, 50*time.Microsecond)
	for range spinMisses { // then the peer slept: long waits
		require.True(t, p.spinNext())
		p.sleptAfterSpin(time.Second)
		p.learn(time.Second)
	}
	for i := 1; i < spinProbe; i++ {
		require.False(t, p.spinNext())
	}
	require.True(t, p.spinNext(), "the probe")
	assert.Equal(t, learned, p.reach, "the probe spins with the budget that caught the peer")
}
