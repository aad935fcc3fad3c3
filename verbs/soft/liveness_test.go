package soft

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// stubTransport answers the watchdog's question as told; the watchdog
// asks nothing else of it.
type stubTransport struct {
	transport
	alive bool
}

func (s *stubTransport) answering() bool { return s.alive }

// The transport timer spends a retry only on an expiry that finds sends
// unanswered while the transport itself goes unanswered too: one while the
// transport answers is a peer stall (the peer's process does not run) and
// costs none, and one that comes a whole timeout late (this process did
// not run) charges nothing either.
func TestWatchdogSpendsRetriesOnlyOnSilentTransport(t *testing.T) {
	q, c, m, buf := growthQP(t)
	q.mu.Lock()
	q.attr.Timeout, q.attr.RetryCnt = 20, 2 // 4.3 s: the timer itself stays out of the way
	q.mu.Unlock()
	require.NoError(t, q.PostSend([]verbs.SendWR{{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(m, buf[:8])}}}))
	stub := &stubTransport{alive: true}
	q.mu.Lock()
	q.snd.sqSent = q.snd.sqTail // sent, unanswered
	q.tr = stub
	q.mu.Unlock()
	t.Cleanup(func() {
		q.mu.Lock()
		q.snd.wdTimer.Stop()
		q.tr = nil
		q.mu.Unlock()
	})
	expire := func(late bool) {
		q.mu.Lock()
		q.snd.wdDue = monotime()
		if late {
			q.snd.wdDue -= 2 * int64(ackTimeout(q.attr.Timeout))
		}
		q.mu.Unlock()
		q.snd.watchdog()
	}
	before := ReadCounters()
	for i := 0; i < 10; i++ {
		expire(false)
	}
	got := ReadCounters()
	assert.Equal(t, uint64(10), got.PeerStalls-before.PeerStalls)
	assert.Zero(t, got.AckTimeouts-before.AckTimeouts)

	stub.alive = false
	expire(true)
	expire(true)
	assert.Equal(t, uint64(2), ReadCounters().LateTimers-got.LateTimers)
	assert.Zero(t, ReadCounters().AckTimeouts-before.AckTimeouts, "a late expiry spent a retry")
	expire(false)
	expire(false)
	assert.Empty(t, pollAll(t, c), "retry count 2: two silent expiries are within it")
	expire(false)
	wcs := pollAll(t, c)
	require.Len(t, wcs, 1)
	assert.Equal(t, verbs.WCRetryExcErr, wcs[0].Status)
	assert.Equal(t, uint64(3), ReadCounters().AckTimeouts-before.AckTimeouts)
}

// A TCP connection whose peer's kernel acknowledges answers, stopped
// process or not; silencing its far end (the tests' hung host) makes it
// unanswered.
func TestTCPTransportAnswering(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			acc <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	var far net.Conn
	select {
	case far = <-acc:
	case <-time.After(10 * time.Second):
		t.Fatal("no accept")
	}
	defer far.Close()
	tr, err := newTCPTransport(c.(*net.TCPConn))
	require.NoError(t, err)
	// Bytes the far end never reads: its kernel acknowledges them.
	_, err = c.Write(make([]byte, 64<<10))
	require.NoError(t, err)
	assert.True(t, tr.answering(), "a connection whose peer's kernel acknowledges")

	silenced.Store(far.LocalAddr().String(), true)
	silencedN.Add(1)
	defer func() {
		silenced.Delete(far.LocalAddr().String())
		silencedN.Add(-1)
	}()
	assert.False(t, tr.answering(), "a silenced far end")
}
