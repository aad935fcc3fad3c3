package rdma

import (
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/verbs/soft"
)

// A Read sleeping on the completion channel (the poll role's holder) is
// woken by a deadline set while it sleeps, and by one moved earlier; a
// Write waiting behind it (no room) by its own deadline.
func TestDeadlineMovedWhileAsleep(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		cfg := softConfig()
		cfg.KeepAlive = -1 // nothing else wakes the sleeper
		c, s := pair(t, cfg)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 8))
			errc <- err
		}()
		time.Sleep(30 * time.Millisecond) // let it sleep
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
		select {
		case err := <-errc:
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		case <-time.After(10 * time.Second):
			t.Fatal("a deadline set during a sleeping Read did not end it")
		}

		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Hour)))
		go func() {
			_, err := c.Read(make([]byte, 8))
			errc <- err
		}()
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(-time.Second)))
		select {
		case err := <-errc:
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		case <-time.After(10 * time.Second):
			t.Fatal("a deadline moved into the past did not end a sleeping Read")
		}

		// The connection still works both ways afterwards.
		require.NoError(t, c.SetReadDeadline(time.Time{}))
		_, err := s.Write([]byte("ping"))
		require.NoError(t, err)
		got := make([]byte, 4)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		assert.Equal(t, "ping", string(got))
	})
}

// A Read and a Write of one connection wait at the same time, each for
// something the other's completions do not bring: whichever holds the poll
// role serves both, and each ends with its own deadline, not the other's.
func TestReadAndWriteShareThePollRole(t *testing.T) {
	cfg := softConfig()
	cfg.RingSize = 16 << 10
	c, s := pair(t, cfg)
	var wg sync.WaitGroup
	wg.Add(2)
	var rerr, werr error
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	go func() {
		defer wg.Done()
		_, rerr = c.Read(make([]byte, 8))
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for werr == nil {
			_, werr = c.Write(buf) // nobody reads s: the ring fills
		}
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(500*time.Millisecond)))
	wg.Wait()
	require.ErrorIs(t, rerr, os.ErrDeadlineExceeded)
	require.ErrorIs(t, werr, os.ErrDeadlineExceeded)

	// Each side's completions reach the other: s drains, c reads s's reply.
	require.NoError(t, c.SetDeadline(time.Time{}))
	go io.Copy(io.Discard, s)
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 256<<10))
		done <- err
	}()
	require.NoError(t, <-done)
}

// ask writes a byte from c, so that c's next wait waits for an answer
// (where soft's channel spins, only such waits do: spinningChannel).
func ask(t *testing.T, c *Conn) {
	t.Helper()
	_, err := c.Write([]byte("?"))
	require.NoError(t, err)
}

// The busy-poll stops once waits keep outlasting it, so that an idle
// connection's Reads cost no CPU, and starts again when a wait is short.
func TestSpinTurnsOffWhenIdle(t *testing.T) {
	cfg := softConfig()
	cfg.PollTime = 50 * time.Microsecond
	c, s := pair(t, cfg)
	buf := make([]byte, 1)
	for i := 0; i < core.SpinMisses+1; i++ {
		ask(t, c)
		go func() {
			time.Sleep(5 * time.Millisecond) // far beyond twice PollTime
			s.Write([]byte("x"))
		}()
		_, err := io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	c.c.Core.Mu.Lock()
	misses := c.c.Core.Poll.Misses
	c.c.Core.Mu.Unlock()
	assert.Equal(t, core.SpinMisses, misses, "long waits in a row")

	// Negative: no polling anywhere; zero: each provider's default.
	cfg2 := *cfg
	cfg2.PollTime = -1
	assert.Zero(t, cfg2.pollTime())
	cfg2.PollTime = 0
	assert.Equal(t, defaultPollTime, cfg2.pollTime())
}

// With spinning off, every spinProbe-th wait spins anyway, and a spin that
// catches what it waits for turns spinning back on: without the probe, a
// host where every sleep outlasts twice the budget would never spin again.
func TestSpinProbeTurnsSpinningBackOn(t *testing.T) {
	cfg := softConfig()
	cfg.PollTime = 2 * time.Second // the probe's spin outlasts the peer's pause
	c, s := pair(t, cfg)
	c.c.Core.Mu.Lock()
	c.c.Core.Poll.Misses = core.SpinMisses
	spins := c.c.Core.Poll.Spins
	c.c.Core.Mu.Unlock()
	buf := make([]byte, 1)
	for i := 0; i < core.SpinProbe; i++ {
		ask(t, c)
		go func() {
			time.Sleep(2 * time.Millisecond)
			s.Write([]byte("x"))
		}()
		_, err := io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	assert.Equal(t, spins+1, c.c.Core.Poll.Spins, "one probe in %d waits", core.SpinProbe)
	assert.Zero(t, c.c.Core.Poll.Misses, "the probe caught the byte: spinning is back on")
}

// The spin's budget follows the peer: waits a little longer than PollTime
// stretch it (up to spinStretch times PollTime), a long one leaves it, and
// quick ones bring it down, never below PollTime.
func TestSpinBudgetLearnsThePeer(t *testing.T) {
	p := core.PollState{Spin: 50 * time.Microsecond, Reach: 50 * time.Microsecond}
	for range 8 {
		p.Learn(90 * time.Microsecond)
	}
	assert.GreaterOrEqual(t, p.Reach, 90*time.Microsecond, "a peer answering in 90 us is within reach")
	assert.LessOrEqual(t, p.Reach, core.SpinStretch*p.Spin)
	for range 8 {
		p.Learn(core.SpinStretch * p.Spin * 9 / 10) // 1.5x that is past the bound
	}
	assert.Equal(t, core.SpinStretch*p.Spin, p.Reach, "never past spinStretch x PollTime")
	p.Learn(time.Millisecond)
	assert.Equal(t, core.SpinStretch*p.Spin, p.Reach, "a slow answer leaves the budget")
	for range 40 {
		p.Learn(time.Microsecond)
	}
	assert.Equal(t, p.Spin, p.Reach, "never below PollTime")
}

// A peer that answers a little after PollTime is caught by the stretched
// spin once the connection has seen a few such waits: no more sleeps.
//
// On a loaded machine one answer can come far later than the peer meant
// (its timer, or the reader, was not scheduled): that wait sleeps, and
// rightly. So the test looks for a run of rounds without a sleep among a
// few tries; with the spin not stretched, every round sleeps and none is
// found.
func TestSpinCatchesAPeerSlowerThanPollTime(t *testing.T) {
	// The spin's budget is the poll role's on soft's TCP path (shared
	// memory's reader spins by a rule of its own), and a connection that
	// talks moves to shared memory: keep this one on TCP.
	defer soft.SetSharedMemory(soft.SetSharedMemory(false))
	cfg := softConfig()
	cfg.PollTime = 5 * time.Millisecond
	c, s := pair(t, cfg)
	buf := make([]byte, 1)
	round := func() {
		ask(t, c)
		go func() {
			time.Sleep(6 * time.Millisecond) // past PollTime, well within the stretch
			s.Write([]byte("x"))
		}()
		_, err := io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	sleeps := func() uint64 {
		c.c.Core.Mu.Lock()
		defer c.c.Core.Mu.Unlock()
		return c.c.Core.Poll.Sleeps
	}
	for range 6 {
		round()
	}
	caught := false
	for try := 0; try < 5 && !caught; try++ {
		before := sleeps()
		for range 3 {
			round()
		}
		caught = sleeps() == before
	}
	assert.True(t, caught, "the stretched spin caught every answer of 3 rounds in a row")
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	assert.Greater(t, c.c.Core.Poll.Reach, cfg.PollTime)
}

// Soft ignores BusyPoll: its completions come from the transport, read by
// the waiting caller. (The suite runs busy-polling conns on rdmacore.)
func TestBusyPollIgnoredOnSoft(t *testing.T) {
	cfg := softConfig()
	cfg.BusyPoll = true
	c, s := pair(t, cfg)
	go io.Copy(s, s)
	_, err := c.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, 1))
	require.NoError(t, err)
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	assert.False(t, c.c.Core.Poll.Busy)
}

// RDMA_BUSY_POLL=1 turns BusyPoll on for a Config that leaves it off.
func TestBusyPollEnv(t *testing.T) {
	t.Setenv(BusyPollEnv, "1")
	assert.True(t, (&Config{}).busyPoll())
	t.Setenv(BusyPollEnv, "")
	assert.False(t, (&Config{}).busyPoll())
	assert.True(t, (&Config{BusyPoll: true}).busyPoll())
}

// A caller that looked, found nothing, and takes the poll role after
// another holder has applied what it waits for (the CQ now empty) must not
// sleep: the data is already there.
func TestNoLostWakeupBetweenHolders(t *testing.T) {
	cfg := softConfig()
	cfg.KeepAlive = -1
	c, s := pair(t, cfg)
	for i := 0; i < 20; i++ {
		_, err := s.Write([]byte("x"))
		require.NoError(t, err)
		// Another holder (as a Write or the keepalive would) applies the
		// data while the reader is between its look and await.
		require.Eventually(t, func() bool {
			c.c.TryPoll()
			c.c.Core.Mu.Lock()
			defer c.c.Core.Mu.Unlock()
			return c.c.RX.Buffered() > 0
		}, 10*time.Second, time.Millisecond)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		c.c.Await(c.c.Core.RcvReady, &c.c.Core.ReadDL, false)
		require.False(t, c.c.Core.ReadDL.Passed(), "round %d: await slept past data already applied", i)
		got := make([]byte, 1)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
	}
}

// On soft's TCP path the channel spins (spinningChannel), and only in waits
// for an answer: a conversation's waits are caught by the spin, while a
// reader that only reads and a writer waiting for room never spin.
func TestSoftTCPSpinsOnlyForAnswers(t *testing.T) {
	prev := soft.SetSharedMemory(false)
	defer soft.SetSharedMemory(prev)
	cfg := softConfig()
	cfg.PollTime = time.Second // every answer comes within it
	cfg.KeepAlive, cfg.PeerTimeout = -1, -1
	c, s := pair(t, cfg)
	counts := func() (spins, caught, sleeps uint64) {
		c.c.Core.Mu.Lock()
		defer c.c.Core.Mu.Unlock()
		return c.c.Core.Poll.Spins, c.c.Core.Poll.Caught, c.c.Core.Poll.Sleeps
	}

	// A conversation: every wait of c's is for s's answer.
	go func() {
		for echoOne(s) == nil {
		}
	}()
	buf := make([]byte, 1)
	spins, caught, sleeps := counts()
	for range 50 {
		ask(t, c)
		_, err := io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	spins2, caught2, sleeps2 := counts()
	assert.Greater(t, spins2, spins, "a wait for an answer spins")
	assert.Greater(t, caught2, caught, "and the spin catches the answers")
	// (A wait that an interrupt ends, a ring's growth say, counts as a
	// sleep too.)
	assert.Less(t, sleeps2-sleeps, uint64(10), "the waits did not sleep")

	// A reader that has said nothing since it last heard: no spin.
	for range 5 {
		go func() {
			time.Sleep(5 * time.Millisecond)
			_, _ = s.Write([]byte("x"))
		}()
		_, err := io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	spins3, _, _ := counts()
	assert.Equal(t, spins2, spins3, "a stream's reader does not spin")
}

// A Write waiting for room (the peer reads late) does not spin on soft's
// TCP path, though the connection has just sent data.
func TestSoftTCPWriteWaitingForRoomDoesNotSpin(t *testing.T) {
	prev := soft.SetSharedMemory(false)
	defer soft.SetSharedMemory(prev)
	cfg := softConfig()
	cfg.PollTime = time.Second
	cfg.KeepAlive, cfg.PeerTimeout = -1, -1
	c, s := pair(t, cfg)
	c.c.Core.Mu.Lock()
	spins := c.c.Core.Poll.Spins
	ring := len(c.c.SB.Buf)
	c.c.Core.Mu.Unlock()
	go func() {
		time.Sleep(20 * time.Millisecond) // c fills the ring and waits
		_, _ = io.Copy(io.Discard, s)
	}()
	_, err := c.Write(make([]byte, 4*ring))
	require.NoError(t, err)
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	assert.Equal(t, spins, c.c.Core.Poll.Spins)
	assert.NotZero(t, c.c.Core.Counters.CreditWaits+c.c.Core.Counters.RingWaits+c.c.Core.Counters.SendBufWaits, "the Write waited for room")
}
