package conntest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func init() {
	register(testDeadlines, testCloseUnblocks, testCloseUnblocksAccept, testPeerClosed, testCloseWrite, testChurn)
}

// An expired deadline is a timeout *net.OpError; clearing it makes the conn
// usable again; a Write blocked on the peer's full ring ends at its
// deadline.
func testDeadlines(t *testing.T, s *suite) {
	c, sv := s.pair(t, nil)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := c.Read(make([]byte, 10))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	checkOpError(t, err, "read")

	require.NoError(t, c.SetReadDeadline(time.Time{}))
	go sv.Write([]byte("x"))
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))

	require.NoError(t, c.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
	buf := make([]byte, 64<<10)
	for err == nil {
		_, err = c.Write(buf)
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	checkOpError(t, err, "write")
}

// Close unblocks a pending Read and a Write blocked on a full ring with
// net.ErrClosed; after it, Close and Write say net.ErrClosed too.
func testCloseUnblocks(t *testing.T, s *suite) {
	c, _ := s.pair(t, nil)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := c.Read(make([]byte, 10))
		assert.ErrorIs(t, err, net.ErrClosed, "read")
		checkOpError(t, err, "read")
	}()
	go func() {
		defer wg.Done()
		var err error
		buf := make([]byte, 64<<10)
		for err == nil {
			_, err = c.Write(buf)
		}
		assert.ErrorIs(t, err, net.ErrClosed, "write")
		checkOpError(t, err, "write")
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c.Close())
	wg.Wait()
	assert.ErrorIs(t, c.Close(), net.ErrClosed)
	_, err := c.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
	checkOpError(t, err, "write")
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, net.ErrClosed)
}

// Closing a listener unblocks its Accept with net.ErrClosed.
func testCloseUnblocksAccept(t *testing.T, s *suite) {
	ln := s.listen(t, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, ln.Close())
	err := <-errc
	assert.ErrorIs(t, err, net.ErrClosed)
	checkOpError(t, err, "accept")
	assert.ErrorIs(t, ln.Close(), net.ErrClosed)
}

// A peer's Close: everything it wrote before arrives, then io.EOF, bare;
// a pending Read ends; writing to it fails soon after, not with a timeout.
func testPeerClosed(t *testing.T, s *suite) {
	c, sv := s.pair(t, nil)
	msg := bytes.Repeat([]byte("abc"), s.scale(100000, 4))
	got := make(chan []byte, 1)
	go func() {
		b, err := io.ReadAll(sv) // pending before the Close; stops at io.EOF
		assert.NoError(t, err)
		got <- b
	}()
	_, err := c.Write(msg)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	select {
	case b := <-got:
		assert.Equal(t, msg, b)
	case <-time.After(s.cfg.DetectWithin):
		t.Fatalf("the peer's Close did not end Read within %v", s.cfg.DetectWithin)
	}
	_, err = sv.Read(make([]byte, 1))
	assert.Equal(t, io.EOF, err)

	// The peer is gone: a write may be accepted while its close is on the
	// way, but not for long. The deadline turns a Write that would wait
	// forever for the dead peer's credit into a failure of this test.
	deadline := time.Now().Add(s.cfg.DetectWithin)
	require.NoError(t, sv.SetWriteDeadline(deadline))
	for err = nil; err == nil && time.Now().Before(deadline); {
		if _, err = sv.Write([]byte("x")); err == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.Error(t, err, "writes to a closed peer still succeed after %v", s.cfg.DetectWithin)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "writes to a closed peer neither fail nor succeed: %v", err)
	checkOpError(t, err, "write")
}

// CloseWrite is a half-close: no more writes here, the peer reads EOF after
// the data and can still answer.
func testCloseWrite(t *testing.T, s *suite) {
	c, sv := s.pair(t, nil)
	_, err := c.Write([]byte("request"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	_, err = c.Write([]byte("more"))
	require.Error(t, err)
	checkOpError(t, err, "write")

	got, err := io.ReadAll(sv)
	require.NoError(t, err)
	assert.Equal(t, "request", string(got))

	_, err = sv.Write([]byte("response"))
	require.NoError(t, err)
	require.NoError(t, sv.CloseWrite())
	got, err = io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "response", string(got))
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// Dial, echo and close, many times: no goroutine and no file descriptor is
// left behind (completion and CM channels, sockets, shared memory).
func testChurn(t *testing.T, s *suite) {
	n := s.scale(200, 4)
	if testing.Short() {
		n = 30
	}
	ln := s.listen(t, nil)
	served := make(chan struct{})
	go func() {
		defer close(served)
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			sc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(sc, sc)
				sc.Close()
			}()
		}
	}()
	dial := s.dialer(nil)
	cycle := func() {
		c, err := dial(ln.Addr().String())
		require.NoError(t, err)
		_, err = c.Write([]byte("ping"))
		require.NoError(t, err)
		b := make([]byte, 4)
		_, err = io.ReadFull(c, b)
		require.NoError(t, err)
		require.Equal(t, "ping", string(b))
		require.NoError(t, c.Close())
	}
	cycle() // whatever lives as long as the process exists from here on
	time.Sleep(100 * time.Millisecond)
	fds := countFDs(t)
	goroutines := goleak.IgnoreCurrent()
	for i := 0; i < n; i++ {
		cycle()
	}
	// The server side closes after reading the client's EOF.
	deadline := time.Now().Add(s.cfg.DetectWithin)
	for countFDs(t) > fds && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.LessOrEqual(t, countFDs(t), fds, "fds after %d cycles", n)
	goleak.VerifyNone(t, goroutines)
	ln.Close()
	<-served
}
