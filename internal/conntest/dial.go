package conntest

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register(testDialHeldRequest)
}

// heldListener is a connection manager listener of the provider under test
// that takes every connect request and answers none: the provider's
// connect then waits for the answer (the kernel's CM for many minutes), so
// only the dialer's own deadline ends the dial.
type heldListener struct {
	addr string
	mu   sync.Mutex
	held []verbs.CMID
	n    int // requests taken
}

func (s *suite) heldListener(t *testing.T) *heldListener {
	t.Helper()
	p, err := verbs.Lookup(s.tuned.Provider)
	require.NoError(t, err)
	ech, err := p.CreateEventChannel()
	require.NoError(t, err)
	lid, err := ech.CreateID()
	require.NoError(t, err)
	require.NoError(t, lid.BindAddr(&net.TCPAddr{IP: net.ParseIP(s.cfg.Host)}))
	require.NoError(t, lid.Listen(8))
	h := &heldListener{addr: net.JoinHostPort(s.cfg.Host, strconv.Itoa(lid.LocalAddr().Port))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := ech.GetEvent(time.Time{})
			if err != nil {
				return
			}
			if ev.Type == verbs.EventConnectRequest {
				h.mu.Lock()
				h.held = append(h.held, ev.ID)
				h.n++
				h.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		h.mu.Lock()
		for _, id := range h.held {
			id.Destroy()
		}
		h.mu.Unlock()
		lid.Destroy()
		ech.Close()
		<-done
	})
	return h
}

func (h *heldListener) taken() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// A dial to a listener that holds the request unanswered ends at the
// Dialer's Timeout, at the context's deadline, or when the context is
// cancelled, whichever comes first, with the error net.Dial gives: a
// timeout *net.OpError of "dial" (os.ErrDeadlineExceeded), or
// context.Canceled. The request did reach the listener each time.
func testDialHeldRequest(t *testing.T, s *suite) {
	h := s.heldListener(t)
	const bound = time.Second
	// dial measures from start, taken by the caller before it set the
	// deadline or the cancel timer: measured from inside, the time spent
	// between setting the deadline and dialing (milliseconds on a loaded
	// machine) would count against the dial and read as an early end.
	dial := func(timeout time.Duration, ctx context.Context, start time.Time) (time.Duration, error) {
		c, err := s.stack.Dial(ctx, s.rdma(nil), h.addr, timeout)
		if c != nil {
			c.Close()
		}
		return time.Since(start), err
	}
	checkTimeout := func(t *testing.T, took time.Duration, err error) {
		t.Helper()
		require.Error(t, err)
		checkOpError(t, err, "dial")
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout(), "%v", err)
		assert.GreaterOrEqual(t, took, bound, "ended before its deadline")
		assert.Less(t, took, bound+s.cfg.DetectWithin)
		t.Logf("%v after %v", err, took)
	}

	t.Run("Timeout", func(t *testing.T) {
		took, err := dial(bound, context.Background(), time.Now())
		checkTimeout(t, took, err)
		assert.Equal(t, 1, h.taken(), "the request reached the listener")
	})
	t.Run("ContextDeadline", func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		took, err := dial(0, ctx, start)
		checkTimeout(t, took, err)
		assert.Equal(t, 2, h.taken())
	})
	t.Run("ContextCancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		timer := time.AfterFunc(bound, cancel)
		defer timer.Stop()
		took, err := dial(0, ctx, start)
		require.Error(t, err)
		checkOpError(t, err, "dial")
		assert.ErrorIs(t, err, context.Canceled)
		assert.GreaterOrEqual(t, took, bound)
		t.Logf("%v after %v", err, took)
		assert.Equal(t, 3, h.taken())
	})
}
