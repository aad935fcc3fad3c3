package capi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAsyncSendRecv(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		s := newStar(t, tr, 2, 64)
		// Receives posted on both peers complete in the order the messages
		// come, not the order they were posted.
		b0, b1 := make([]byte, 64), make([]byte, 64)
		r0, err := s.server.IRecv(0, b0)
		require.NoError(t, err)
		r1, err := s.server.IRecv(1, b1)
		require.NoError(t, err)
		done, _, _ := r0.Test()
		assert.False(t, done)
		_, err = s.clients[1].Send(0, []byte("from 1"))
		require.NoError(t, err)
		i, n, err := WaitAny([]*Request{r0, r1})
		require.NoError(t, err)
		assert.Equal(t, 1, i)
		assert.Equal(t, "from 1", string(b1[:n]))
		_, err = s.clients[0].Send(0, []byte("from 0"))
		require.NoError(t, err)
		n, err = r0.Wait()
		require.NoError(t, err)
		assert.Equal(t, "from 0", string(b0[:n]))

		// Many in flight on one peer, both ways: they keep their order.
		const many = 200
		sends := make([]*Request, many)
		recvs := make([]*Request, many)
		bufs := make([][]byte, many)
		for k := range many {
			bufs[k] = make([]byte, 64)
			recvs[k], err = s.server.IRecv(0, bufs[k])
			require.NoError(t, err)
			sends[k], err = s.clients[0].ISend(0, []byte(fmt.Sprintf("message %d", k)))
			require.NoError(t, err)
		}
		for k := range many {
			n, err := sends[k].Wait()
			require.NoError(t, err)
			require.Equal(t, len(fmt.Sprintf("message %d", k)), n)
			n, err = recvs[k].Wait()
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("message %d", k), string(bufs[k][:n]))
		}

		_, err = s.server.ISend(0, make([]byte, 65))
		require.ErrorIs(t, err, ErrMessageTooLong)
		_, err = s.server.IRecv(7, b0)
		require.ErrorIs(t, err, ErrNoSuchPeer)
		_, _, err = WaitAny([]*Request{nil})
		require.ErrorIs(t, err, ErrInvalidArgument)

		// Close cancels what is pending.
		var pending []*Request
		for range 3 {
			r, err := s.server.IRecv(1, make([]byte, 64))
			require.NoError(t, err)
			pending = append(pending, r)
		}
		require.NoError(t, s.server.Close())
		for k, r := range pending {
			done, _, err := r.Test()
			require.True(t, done, "request %d still pending after Close", k)
			require.ErrorIs(t, err, ErrCanceled, "request %d", k)
		}
		_, err = s.server.IRecv(1, b0)
		require.ErrorIs(t, err, ErrClosed)
	})
}

// The request queue bounds the requests in flight, cancels on close those
// that have not started, and marks those that fail as it closes.
func TestRequestQueue(t *testing.T) {
	p := newPeer(0, pipeConn(t), 64, func() bool { return false })
	q := newRequestQueue()
	release := make(chan struct{})
	blocked := func() (int, error) { <-release; return 1, nil }
	reqs := make([]*Request, 0, MaxInFlight)
	for range MaxInFlight {
		r, err := q.start("isend to", p, nil, blocked, nil)
		require.NoError(t, err)
		reqs = append(reqs, r)
	}
	_, err := q.start("isend to", p, nil, blocked, nil)
	assert.ErrorIs(t, err, ErrBusy)
	close(release)
	for _, r := range reqs {
		n, err := r.Wait()
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}

	// Behind a request under way in its fifo, one that has not started
	// is cancelled by close: cancel runs instead of run.
	var f fifo
	f.init()
	started, finish := make(chan struct{}), make(chan struct{})
	first, err := q.start("isend to", p, &f, func() (int, error) {
		close(started)
		<-finish
		return -1, errors.New("connection closed")
	}, nil)
	require.NoError(t, err)
	<-started
	ran, cancelled := false, false
	second, err := q.start("isend to", p, &f, func() (int, error) { ran = true; return 1, nil }, func() { cancelled = true })
	require.NoError(t, err)
	q.close()
	close(finish)
	q.wait()
	_, err = first.Wait()
	assert.ErrorIs(t, err, ErrCanceled, "a request that fails as the queue closes")
	_, err = second.Wait()
	assert.ErrorIs(t, err, ErrCanceled)
	assert.True(t, cancelled)
	assert.False(t, ran)
	_, err = q.start("isend to", p, nil, blocked, nil)
	assert.ErrorIs(t, err, ErrClosed)
}
