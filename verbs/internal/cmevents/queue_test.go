package cmevents

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func TestFIFOAndDeadline(t *testing.T) {
	q := New()
	q.Push(verbs.CMEvent{Type: verbs.EventAddrResolved})
	q.Push(verbs.CMEvent{Type: verbs.EventRouteResolved})
	ev, err := q.Get(time.Time{})
	require.NoError(t, err)
	require.Equal(t, verbs.EventAddrResolved, ev.Type)
	ev, err = q.Get(time.Now().Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventRouteResolved, ev.Type)
	_, err = q.Get(time.Now().Add(10 * time.Millisecond))
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "got %v", err)
	_, err = q.Get(time.Now().Add(-time.Second))
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "got %v", err)
}

func TestCloseWakesWaiters(t *testing.T) {
	q := New()
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := q.Get(time.Time{}); errs <- err }()
	}
	time.Sleep(10 * time.Millisecond) // let them park (a hang check below, not a speed one)
	require.True(t, q.Close())
	require.False(t, q.Close())
	require.True(t, q.Closed())
	for range 2 {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, verbs.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake a waiter")
		}
	}
	q.Push(verbs.CMEvent{}) // dropped, no panic
	_, err := q.Get(time.Time{})
	require.ErrorIs(t, err, verbs.ErrClosed)
}

func TestEveryEventReachesOneWaiter(t *testing.T) {
	q := New()
	const n = 100
	got := make(chan verbs.CMEventType, n)
	for range 4 {
		go func() {
			for {
				ev, err := q.Get(time.Time{})
				if err != nil {
					return
				}
				got <- ev.Type
			}
		}()
	}
	for range n {
		q.Push(verbs.CMEvent{Type: verbs.EventEstablished})
	}
	for range n {
		select {
		case ty := <-got:
			require.Equal(t, verbs.EventEstablished, ty)
		case <-time.After(5 * time.Second):
			t.Fatal("an event was not delivered")
		}
	}
	q.Close()
}

// Notify's function runs once per event pushed, with its type, after the
// event can be taken, and never again once Notify(nil) or Close has returned.
func TestNotifyCallsPerPushUntilStopped(t *testing.T) {
	q := New()
	var calls int
	var got, told []verbs.CMEventType
	q.Notify(func(t verbs.CMEventType) {
		calls++ // under the queue's lock: no race with the checks below
		told = append(told, t)
	})
	q.Push(verbs.CMEvent{Type: verbs.EventDisconnected})
	q.Push(verbs.CMEvent{Type: verbs.EventEstablished})
	require.Equal(t, 2, calls)
	for range 2 {
		ev, err := q.Get(time.Now().Add(-time.Second)) // queued: no wait
		require.NoError(t, err)
		got = append(got, ev.Type)
	}
	require.Equal(t, []verbs.CMEventType{verbs.EventDisconnected, verbs.EventEstablished}, got)
	require.Equal(t, got, told, "each event's type, in order")
	q.Notify(nil)
	q.Push(verbs.CMEvent{Type: verbs.EventDisconnected})
	require.Equal(t, 2, calls)
	q.Notify(func(verbs.CMEventType) { calls++ })
	q.Close()
	q.Push(verbs.CMEvent{Type: verbs.EventDisconnected})
	require.Equal(t, 2, calls)
}
