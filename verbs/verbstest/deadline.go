package verbstest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("CompChannelDeadline", testCompChannelDeadline)
	register("CompChannelInterrupt", testCompChannelInterrupt)
}

// getEvent runs GetEvent in a goroutine and returns its result channel.
func getEvent(cc verbs.CompChannel) <-chan error {
	done := make(chan error, 1)
	go func() {
		cq, err := cc.GetEvent()
		if err == nil {
			cc.AckEvents(cq, 1)
		}
		done <- err
	}()
	return done
}

// A completion channel's deadline bounds GetEvent as a read deadline bounds
// net.Conn's Read: passed, it fails at once; in the future, it fires then;
// events that arrive meanwhile are kept for the next GetEvent.
func testCompChannelDeadline(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o) // sv's channel is fed by one connected QP
	cc := sv.cc

	require.NoError(t, cc.SetDeadline(time.Now().Add(-time.Second)))
	start := time.Now()
	_, err := cc.GetEvent()
	require.True(t, isDeadline(err), "passed deadline: %v", err)
	require.Less(t, time.Since(start), s.cfg.Timeout/2)

	// Judged against the deadline itself, not against a clock started after
	// SetDeadline returned: on a loaded host SetDeadline alone can take
	// milliseconds (seen: 7 ms in a Soft-RoCE guest).
	at := time.Now().Add(30 * time.Millisecond)
	require.NoError(t, cc.SetDeadline(at))
	_, err = cc.GetEvent()
	require.True(t, isDeadline(err), "future deadline: %v", err)
	require.False(t, time.Now().Before(at), "GetEvent returned %v before its deadline", time.Until(at))

	// An event that arrives while the deadline has passed stays queued.
	require.NoError(t, sv.rcq.ReqNotify(false))
	postRecv(t, sv, 1, 0, 64)
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	time.Sleep(20 * time.Millisecond)
	_, err = cc.GetEvent()
	require.True(t, isDeadline(err), "%v", err)
	require.NoError(t, cc.SetDeadline(time.Time{}))
	select {
	case err := <-getEvent(cc):
		require.NoError(t, err)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("the event that arrived past the deadline was lost")
	}
	s.pollOne(t, sv.rcq, verbs.WCSuccess)

	// A deadline moved further out before it fires does not fire early.
	require.NoError(t, cc.SetDeadline(time.Now().Add(10*time.Millisecond)))
	require.NoError(t, cc.SetDeadline(time.Now().Add(time.Hour)))
	done := getEvent(cc)
	select {
	case err := <-done:
		t.Fatalf("GetEvent returned %v before its deadline", err)
	case <-time.After(60 * time.Millisecond):
	}
	require.NoError(t, sv.rcq.ReqNotify(false))
	postRecv(t, sv, 2, 0, 64)
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("no completion event under a distant deadline")
	}
	s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.NoError(t, cc.SetDeadline(time.Time{}))
}

// Another goroutine interrupts a pending GetEvent by moving the deadline
// into the past, whether the waiter parks on the channel or (soft) reads
// its QP's transport; the waiter then waits again and gets the next event.
// After Close, SetDeadline fails.
func testCompChannelInterrupt(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	cc := sv.cc
	for i := 0; i < 20; i++ {
		// An event first: a soft waiter that just had one goes on to read
		// the transport itself in its next GetEvent.
		require.NoError(t, sv.rcq.ReqNotify(false))
		done := getEvent(cc)
		postRecv(t, sv, uint64(i), 0, 64)
		postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(s.cfg.Timeout):
			t.Fatalf("round %d: no completion event", i)
		}
		s.pollOne(t, sv.rcq, verbs.WCSuccess)
		require.NoError(t, sv.rcq.ReqNotify(false))
		done = getEvent(cc)
		time.Sleep(time.Duration(i%4) * time.Millisecond)
		require.NoError(t, cc.SetDeadline(time.Unix(1, 0)))
		select {
		case err := <-done:
			require.True(t, isDeadline(err), "round %d: %v", i, err)
		case <-time.After(s.cfg.Timeout):
			t.Fatalf("round %d: SetDeadline in the past did not wake GetEvent", i)
		}
		require.NoError(t, cc.SetDeadline(time.Time{}))
	}
	// The QP still works and the armed CQ's event comes.
	done := getEvent(cc)
	postRecv(t, sv, 99, 0, 64)
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("no completion event after interrupts")
	}
	s.pollOne(t, sv.rcq, verbs.WCSuccess)

	ctx := s.device(t)
	cc2, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	require.NoError(t, cc2.SetDeadline(time.Now().Add(time.Hour)))
	require.NoError(t, cc2.Close())
	require.ErrorIs(t, cc2.SetDeadline(time.Time{}), verbs.ErrClosed)
}
