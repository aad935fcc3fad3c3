//go:build linux

package soft

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// newChannelQP is a QP of its own device whose CQ delivers its events on
// a completion channel, both returned.
func newChannelQP(t testing.TB) (*qp, *compChannel, *pd) {
	t.Helper()
	ctx := &device{}
	p, err := ctx.AllocPD()
	require.NoError(t, err)
	chi, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	cqi, err := ctx.CreateCQ(256, chi)
	require.NoError(t, err)
	q := newTestQP(t, p.(*pd), cqi)
	t.Cleanup(func() {
		_ = cqi.Destroy()
		_ = chi.Close()
	})
	return q, chi.(*compChannel), p.(*pd)
}

// newTestQP is a QP on p completing on c, destroyed at the test's end.
func newTestQP(t testing.TB, p *pd, c verbs.CQ) *qp {
	t.Helper()
	q, err := newQP(p, &verbs.QPInitAttr{SendCQ: c, RecvCQ: c,
		Cap: verbs.QPCap{MaxSendWR: 129, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Destroy() })
	return q
}

// soleOf is c.soleQP(), within d: nil and false if it did not answer.
func soleOf(c *compChannel, d time.Duration) (*qp, bool) {
	got := make(chan *qp, 1)
	go func() {
		c.mu.Lock()
		p := c.soleQP()
		c.mu.Unlock()
		got <- p
	}()
	select {
	case p := <-got:
		return p, true
	case <-time.After(d):
		return nil, false
	}
}

// A GetEvent waiter asks soleQP on every wait: the answer is kept until
// a QP joins or leaves one of the channel's CQs, so that the wait does
// not lock the CQs and walk their QP sets each time; a QP joining or
// leaving is seen at the next wait.
func TestSoleQPKeptUntilMembershipChanges(t *testing.T) {
	q, c, p := newChannelQP(t)
	q.rxRole.live.Store(true)
	got, ok := soleOf(c, 5*time.Second)
	require.True(t, ok)
	require.Same(t, q, got)

	// With the CQ's lock held elsewhere, the kept answer comes at once.
	cqp := c.cqs[0]
	cqp.mu.Lock()
	got, ok = soleOf(c, time.Second)
	cqp.mu.Unlock()
	require.True(t, ok, "soleQP waited on the CQ's lock: the answer was not kept")
	assert.Same(t, q, got)

	// A second QP on the CQ: no sole QP; once it is gone, q again.
	q2, err := newQP(p, &verbs.QPInitAttr{SendCQ: cqp, RecvCQ: cqp,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	got, ok = soleOf(c, 5*time.Second)
	require.True(t, ok)
	assert.Nil(t, got)
	require.NoError(t, q2.Destroy())
	got, ok = soleOf(c, 5*time.Second)
	require.True(t, ok)
	assert.Same(t, q, got)

	// A QP whose receiver does not run is no sole QP, kept answer or not.
	q.rxRole.live.Store(false)
	got, ok = soleOf(c, 5*time.Second)
	require.True(t, ok)
	assert.Nil(t, got)
}

// rxPair is two connected QPs over TCP loopback, each with its background
// receiver: a, whose CQ delivers on c and which has 64 receives posted,
// and one that sends to it (send).
type rxPair struct {
	a    *qp
	c    *compChannel
	post func() // posts a receive on a
	send func() // b sends a 64-byte message
	wc   []verbs.WC
}

func newRxPair(t *testing.T) *rxPair {
	ca, cb := loopbackPair(t)
	a, c, ap := newChannelQP(t)
	mem, err := verbs.AllocMemory(4096)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Free() })
	am, err := ap.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	t.Cleanup(func() { _ = am.Dereg() })
	b, _, bp := newChannelQP(t)
	bm, err := bp.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bm.Dereg() })
	for _, e := range []struct {
		q *qp
		c transport
	}{{a, mustTCP(t, ca)}, {b, mustTCP(t, cb)}} {
		e.q.mu.Lock()
		e.q.state = verbs.QPSRTS
		e.q.mu.Unlock()
		e.q.start(e.c, &hsMsg{qpn: 1, sqDepth: 129, delayedAcks: true}, nil)
		e.q.startReceiver(nil)
	}
	p := &rxPair{a: a, c: c, wc: make([]verbs.WC, 16)}
	p.post = func() {
		require.NoError(t, a.PostRecv([]verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{verbs.SGEOf(am, mem.Bytes()[:64])}}}))
	}
	p.send = func() {
		_ = b.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.OpSend,
			SG: []verbs.SGE{verbs.SGEOf(bm, mem.Bytes()[64:128])}}})
	}
	for range 64 {
		p.post()
	}
	return p
}

// received polls a's CQ and counts the messages in it, posting a receive
// for each.
func (p *rxPair) received(t *testing.T) int {
	n, err := p.c.cqs[0].Poll(p.wc)
	require.NoError(t, err)
	got := 0
	for _, w := range p.wc[:n] {
		if w.Opcode == verbs.WCRecv {
			got++
			p.post()
		}
	}
	return got
}

// await waits on a's channel, as GetEvent's caller (so holding the
// receive role), for a message, within d.
func (p *rxPair) await(t *testing.T, d time.Duration) int {
	for end := time.Now().Add(d); time.Now().Before(end); {
		require.NoError(t, p.c.cqs[0].ReqNotify(false))
		if got := p.received(t); got > 0 {
			return got
		}
		require.NoError(t, p.c.SetDeadline(end))
		if _, err := p.c.GetEvent(); err != nil {
			continue
		}
		if got := p.received(t); got > 0 {
			return got
		}
	}
	return 0
}

// While a GetEvent waiter keeps coming back for the receive role, the
// handback timer's period doubles up to rxHandbackMax, so that its
// expiries, each a wake-up of the background receiver that finds the role
// taken again, come every rxHandbackMax rather than every rxHandback;
// once the waiter stops, the background takes the role back within that
// and the period falls back to rxHandback.
func TestHandbackLengthensWhileAWaiterReturns(t *testing.T) {
	p := newRxPair(t)
	a, c, post := p.a, p.c, p.post

	// b sends a message every 200 us for 150 ms; a's waiter takes each.
	const run = 150 * time.Millisecond
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for end := time.Now().Add(run); time.Now().Before(end); {
			p.send()
			time.Sleep(200 * time.Microsecond)
		}
	}()
	cqa := c.cqs[0]
	wc := make([]verbs.WC, 16)
	fired0 := a.rxRole.fired.Load()
	got := 0
	var longest time.Duration // the longest period seen while the waiter returns
	for end := time.Now().Add(run); time.Now().Before(end); {
		longest = max(longest, a.rxRole.handback())
		require.NoError(t, cqa.ReqNotify(false))
		n, err := cqa.Poll(wc)
		require.NoError(t, err)
		if n == 0 {
			require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Millisecond)))
			if _, err := c.GetEvent(); err != nil {
				continue
			}
			n, err = cqa.Poll(wc)
			require.NoError(t, err)
		}
		for _, w := range wc[:n] {
			if w.Opcode == verbs.WCRecv {
				got++
				post()
			}
		}
	}
	fired := a.rxRole.fired.Load() - fired0
	wg.Wait()
	t.Logf("%d messages, %d expiries in %v, longest period %v", got, fired, run, longest)
	require.Greater(t, got, 50, "the waiter took too few messages to judge")
	assert.Equal(t, rxHandbackMax, longest, "the period did not lengthen")
	// Every rxHandback: up to 150 expiries; every rxHandbackMax: about
	// 38, more where a slow waiter let the background take the role.
	assert.LessOrEqual(t, fired, uint64(run/(2*rxHandback)), "the handback timer fired %d times in %v", fired, run)

	// The waiter is gone: the background takes the role back, and the
	// period is rxHandback again.
	require.Eventually(t, func() bool {
		return a.rxRole.owner.Load() == rxBackground && a.rxRole.handback() == rxHandback
	}, 5*time.Second, time.Millisecond)
}

// A waiter that comes back every few milliseconds, after the background
// took the role in the gap, teaches the background to leave the role free
// longer (idleNeed doubles, up to rxIdleMax): after a few rounds it no
// longer takes the role between the waiter's waits. A message that comes
// while nobody waits is still read (within rxIdleMax), and a take-over
// that serves input brings the need back to rxHandback.
func TestHandbackLearnsAWaiterThatReturns(t *testing.T) {
	p := newRxPair(t)
	const rounds, gap = 24, 5 * time.Millisecond
	var takesLate uint64
	var longest time.Duration
	for i := range rounds {
		if i == rounds/2 {
			takesLate = p.a.rxRole.takes.Load()
		}
		time.Sleep(gap) // the role is free: the waiter is busy elsewhere
		go func() {
			time.Sleep(gap / 5)
			p.send()
		}()
		require.Equal(t, 1, p.await(t, 5*time.Second), "round %d", i)
		longest = max(longest, p.a.rxRole.idleNeed())
	}
	takesLate = p.a.rxRole.takes.Load() - takesLate
	t.Logf("background take-overs in the last %d rounds: %d; longest need %v", rounds/2, takesLate, longest)
	assert.Greater(t, longest, gap, "the need did not grow past the waiter's gap")
	assert.LessOrEqual(t, takesLate, uint64(rounds/4), "the background kept taking the role between waits")

	// Nobody waits: the background still reads a message, within
	// rxIdleMax of the role falling free.
	start := time.Now()
	p.send()
	require.Eventually(t, func() bool { return p.received(t) == 1 }, 5*time.Second, time.Millisecond)
	assert.Less(t, time.Since(start), rxIdleMax+500*time.Millisecond, "a message while nobody waits")

	// The background served input before a waiter came: the need is back
	// to rxHandback once a waiter takes the role again.
	go func() {
		time.Sleep(gap)
		p.send()
	}()
	require.Equal(t, 1, p.await(t, 5*time.Second))
	assert.Equal(t, rxHandback, p.a.rxRole.idleNeed())
}
