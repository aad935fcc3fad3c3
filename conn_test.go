package rdma

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
)

func TestNettestConn(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) { testNettestConn(t) })
}

func testNettestConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		cfg := testConfig()
		ln, err := (&ListenConfig{Config: cfg}).Listen(t.Context(), "rdma", net.JoinHostPort(testHost(cfg), "0"))
		if err != nil {
			return nil, nil, nil, err
		}
		defer ln.Close()
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			acc <- c
		}()
		d := Dialer{Config: cfg}
		c1, err = d.Dial("rdma", ln.Addr().String())
		if err != nil {
			return nil, nil, nil, err
		}
		c2 = <-acc
		if c2 == nil {
			c1.Close()
			return nil, nil, nil, errors.New("accept failed")
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

func TestEcho(t *testing.T) {
	c, s := pair(t, nil)
	assert.Equal(t, ProviderSoft, c.Provider())
	assert.Equal(t, ProviderSoft, s.Provider())
	assert.Equal(t, "rdma", c.LocalAddr().Network())
	assert.Equal(t, "rdma", c.RemoteAddr().Network())
	assert.Equal(t, s.LocalAddr().String(), c.RemoteAddr().String())
	assert.Equal(t, c.LocalAddr().String(), s.RemoteAddr().String())

	for _, n := range []int{1, 7, 64, 255, 256, 257, 4096, 65536, 65537, 300000} {
		msg := make([]byte, n)
		rand.Read(msg)
		go func() {
			_, err := c.Write(msg)
			assert.NoError(t, err)
		}()
		got := make([]byte, n)
		_, err := io.ReadFull(s, got)
		require.NoError(t, err)
		require.True(t, bytes.Equal(msg, got), "size %d", n)
	}
}

// A message far larger than the ring is split, and the ring wraps many times.
func TestLargerThanRing(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) { testLargerThanRing(t) })
}

func testLargerThanRing(t *testing.T) {
	cfg := testConfig()
	cfg.RingSize = 8 << 10
	cfg.SendBufferSize = 4 << 10
	c, s := pair(t, cfg)
	msg := make([]byte, 3<<20+123)
	rand.Read(msg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		errc <- err
	}()
	got := make([]byte, len(msg))
	// Odd read sizes, so that reads straddle the ring's end.
	for off := 0; off < len(got); {
		n, err := s.Read(got[off:min(len(got), off+777)])
		require.NoError(t, err)
		off += n
	}
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(msg, got))
}

// Both directions at once, with small credit windows, so that credits and
// data cross all the time.
func TestBidirectional(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) { testBidirectional(t) })
}

func testBidirectional(t *testing.T) {
	cfg := testConfig()
	cfg.RingSize = 16 << 10
	cfg.RecvDepth = 8
	cfg.SendDepth = 8
	c, s := pair(t, cfg)
	const total = 4 << 20
	var wg sync.WaitGroup
	check := func(w, r *Conn, seed int64) {
		defer wg.Done()
		want := make([]byte, total)
		rand.New(rand.NewSource(seed)).Read(want)
		var iwg sync.WaitGroup
		iwg.Add(1)
		go func() {
			defer iwg.Done()
			for off := 0; off < total; {
				n := min(total-off, 1+rand.Intn(5000))
				_, err := w.Write(want[off : off+n])
				if !assert.NoError(t, err) {
					return
				}
				off += n
			}
		}()
		got := make([]byte, total)
		_, err := io.ReadFull(r, got)
		assert.NoError(t, err)
		assert.True(t, bytes.Equal(want, got))
		iwg.Wait()
	}
	wg.Add(2)
	go check(c, s, 1)
	go check(s, c, 2)
	wg.Wait()
}

func TestDeadlines(t *testing.T) {
	c, s := pair(t, nil)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := c.Read(make([]byte, 10))
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded))
	var ne net.Error
	require.True(t, errors.As(err, &ne))
	assert.True(t, ne.Timeout())
	var oe *net.OpError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "read", oe.Op)
	assert.Equal(t, "rdma", oe.Net)

	// Clearing the deadline makes the conn usable again.
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	go s.Write([]byte("x"))
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	require.NoError(t, err)

	// Write blocks once the peer's ring is full; the deadline ends it.
	require.NoError(t, c.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
	buf := make([]byte, 64<<10)
	for err == nil {
		_, err = c.Write(buf)
	}
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded))
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "write", oe.Op)
	assert.Equal(t, "rdma", oe.Net)
}

func TestCloseUnblocks(t *testing.T) {
	c, _ := pair(t, nil)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := c.Read(make([]byte, 10))
		assert.True(t, errors.Is(err, net.ErrClosed), "read: %v", err)
		var oe *net.OpError
		if assert.True(t, errors.As(err, &oe)) {
			assert.Equal(t, "read", oe.Op)
			assert.Equal(t, "rdma", oe.Net)
		}
	}()
	go func() {
		defer wg.Done()
		var err error
		buf := make([]byte, 64<<10)
		for err == nil {
			_, err = c.Write(buf)
		}
		assert.True(t, errors.Is(err, net.ErrClosed), "write: %v", err)
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c.Close())
	wg.Wait()
	assert.True(t, errors.Is(c.Close(), net.ErrClosed))
	_, err := c.Write([]byte("x"))
	assert.True(t, errors.Is(err, net.ErrClosed))
}

func TestPeerCloseIsEOF(t *testing.T) {
	c, s := pair(t, nil)
	msg := bytes.Repeat([]byte("abc"), 100000)
	_, err := c.Write(msg)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	got, err := io.ReadAll(s)
	require.NoError(t, err) // ReadAll stops at io.EOF
	assert.Equal(t, msg, got)
	_, err = s.Read(make([]byte, 1))
	assert.Equal(t, io.EOF, err)
	// Writing to a closed peer fails, sooner or later.
	for i := 0; i < 100 && err != nil && err == io.EOF; i++ {
		_, err = s.Write([]byte("x"))
		if err == nil {
			time.Sleep(10 * time.Millisecond)
			err = io.EOF
		}
	}
	assert.Error(t, err)
}

func TestCloseWrite(t *testing.T) {
	c, s := pair(t, nil)
	_, err := c.Write([]byte("request"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	_, err = c.Write([]byte("more"))
	assert.Error(t, err)

	got, err := io.ReadAll(s)
	require.NoError(t, err)
	assert.Equal(t, "request", string(got))

	// The other direction goes on.
	_, err = s.Write([]byte("response"))
	require.NoError(t, err)
	require.NoError(t, s.CloseWrite())
	got, err = io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "response", string(got))
}

func TestZeroAllocs(t *testing.T) {
	c, s := pair(t, nil)
	wbuf := make([]byte, 4096)
	rbuf := make([]byte, 4096)
	small := make([]byte, 64)
	// Warm up: credits and buffers in steady state.
	for i := 0; i < 1000; i++ {
		_, err := c.Write(wbuf)
		require.NoError(t, err)
		_, err = io.ReadFull(s, rbuf)
		require.NoError(t, err)
	}
	allocs := testing.AllocsPerRun(2000, func() {
		if _, err := c.Write(wbuf); err != nil {
			panic(err)
		}
		if _, err := io.ReadFull(s, rbuf); err != nil {
			panic(err)
		}
		if _, err := s.Write(small); err != nil {
			panic(err)
		}
		if _, err := io.ReadFull(c, small); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per Write/Read round")
}

// A stream is not shredded into slivers where the send buffer wraps or where
// credit trickles back: writes of 65520 bytes leave a 256-byte tail at the
// end of a 1 MiB send buffer, which must be skipped, not posted a piece at a
// time.
func TestNoSliverWrites(t *testing.T) {
	c, s := pair(t, nil)
	const size, count = 65520, 200
	go func() {
		buf := make([]byte, size)
		for i := 0; i < count; i++ {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	_, err := io.ReadFull(s, make([]byte, size*count))
	require.NoError(t, err)
	c.mu.Lock()
	posted := c.sqPosted
	c.mu.Unlock()
	// One write per chunk (a 64 KiB chunk holds a whole write), a piece at
	// each ring wrap, and credit updates: far below two per write.
	assert.Less(t, posted, uint64(2*count), "send WRs for %d writes", count)
}

// With PollTime set, Read and Write busy-poll the CQ before sleeping; the
// data is the same either way.
func TestPollTime(t *testing.T) {
	cfg := testConfig()
	cfg.PollTime = 50 * time.Microsecond
	cfg.RingSize = 16 << 10
	c, s := pair(t, cfg)
	go io.Copy(s, s)
	want := make([]byte, 1<<20)
	rand.Read(want)
	go func() {
		for off := 0; off < len(want); off += 3000 {
			if _, err := c.Write(want[off:min(len(want), off+3000)]); err != nil {
				return
			}
		}
	}()
	got := make([]byte, len(want))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got))
}
