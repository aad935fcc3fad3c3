package conntest

import (
	"bytes"
	crand "crypto/rand"
	"io"
	"math/rand"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/rdmanet/rdma/internal/testsupport"
)

func init() {
	register(testNettest, testEcho, testLargerThanRing, testBidirectional, testZeroAllocs)
}

// x/net/nettest's conformance tests of a net.Conn.
func testNettest(t *testing.T, s *suite) {
	ln := s.listen(t, nil)
	dial := s.dialer(nil)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		c1, c2, err = testsupport.TryConnect(ln, dial)
		if err != nil {
			return nil, nil, nil, err
		}
		c1, c2 = s.wrap(c1.(Conn)), s.wrap(c2.(Conn))
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// Messages of sizes around the credit, chunk and ring boundaries arrive
// whole, on a conn whose ends name each other and the provider.
func testEcho(t *testing.T, s *suite) {
	c, sv := s.pair(t, nil)
	p := s.tuned.Provider
	assert.Equal(t, p, c.Provider())
	assert.Equal(t, p, sv.Provider())
	s.checkTransport(t, c)
	s.checkTransport(t, sv)
	assert.Equal(t, network, c.LocalAddr().Network())
	assert.Equal(t, network, c.RemoteAddr().Network())
	assert.Equal(t, sv.LocalAddr().String(), c.RemoteAddr().String())
	assert.Equal(t, c.LocalAddr().String(), sv.RemoteAddr().String())

	for _, n := range []int{1, 7, 64, 255, 256, 257, 4096, 65536, 65537, 300000} {
		msg := make([]byte, n)
		crand.Read(msg)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(msg)
			errc <- err
		}()
		got := make([]byte, n)
		_, err := io.ReadFull(sv, got)
		require.NoError(t, err)
		require.NoError(t, <-errc)
		require.True(t, bytes.Equal(msg, got), "size %d", n)
	}
}

// A write far larger than the ring is split, and the ring wraps many times;
// reads of odd sizes straddle its end.
func testLargerThanRing(t *testing.T, s *suite) {
	cfg := s.config()
	cfg.RingSize = 8 << 10
	cfg.SendBufferSize = 4 << 10
	c, sv := s.pair(t, cfg)
	msg := make([]byte, s.scale(3<<20, 8)+123)
	crand.Read(msg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		errc <- err
	}()
	got := make([]byte, len(msg))
	for off := 0; off < len(got); {
		n, err := sv.Read(got[off:min(len(got), off+777)])
		require.NoError(t, err)
		off += n
	}
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(msg, got))
}

// Both directions at once with small credit windows, so that credits and
// data cross all the time.
func testBidirectional(t *testing.T, s *suite) {
	cfg := s.config()
	cfg.RingSize = 16 << 10
	cfg.RecvDepth = 8
	cfg.SendDepth = 8
	c, sv := s.pair(t, cfg)
	total := s.scale(4<<20, 8)
	var wg sync.WaitGroup
	check := func(w, r Conn, key int64) {
		defer wg.Done()
		want := make([]byte, total)
		rng := rand.New(rand.NewSource(key))
		rng.Read(want)
		werr := make(chan error, 1)
		go func() {
			for off := 0; off < total; {
				n := min(total-off, 1+rng.Intn(5000))
				if _, err := w.Write(want[off : off+n]); err != nil {
					werr <- err
					return
				}
				off += n
			}
			werr <- nil
		}()
		got := make([]byte, total)
		_, err := io.ReadFull(r, got)
		assert.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "key %d", key)
		assert.NoError(t, <-werr)
	}
	wg.Add(2)
	go check(c, sv, 1)
	go check(sv, c, 2)
	wg.Wait()
}

// Write and Read allocate nothing once the conn is in its steady state.
// The peer's half of each round runs in a goroutine of its own: a Write
// that takes the rendezvous (Config.Buffers) returns only once the peer
// has read it. testing.AllocsPerRun counts the whole process's
// allocations, the peer's too.
func testZeroAllocs(t *testing.T, s *suite) {
	c, sv := s.pair(t, nil)
	wbuf := make([]byte, 4096)
	rbuf := make([]byte, 4096)
	small := make([]byte, 64)
	reply := make([]byte, 64)
	warm, runs := s.scale(1000, 5), s.scale(2000, 10)
	peer := make(chan error, 1)
	go func() {
		// AllocsPerRun runs the round once before it counts.
		for i := 0; i < warm+1+runs; i++ {
			if _, err := io.ReadFull(sv, rbuf); err != nil {
				peer <- err
				return
			}
			if _, err := sv.Write(small); err != nil {
				peer <- err
				return
			}
		}
		peer <- nil
	}()
	round := func() {
		if _, err := c.Write(wbuf); err != nil {
			panic(err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			panic(err)
		}
	}
	// Warm up: credits and buffers in steady state.
	for i := 0; i < warm; i++ {
		round()
	}
	allocs := testing.AllocsPerRun(runs, round)
	assert.Zero(t, allocs, "allocations per Write/Read round")
	require.NoError(t, <-peer)
	if sent, windowed, ok := s.stack.Rendezvous(unwrap(c)); ok && s.cfg.Buffers {
		// Not vacuous: the Writes took the rendezvous.
		t.Logf("rendezvous: %d sent, %d through a window", sent, windowed)
		assert.GreaterOrEqual(t, sent, uint64(warm+1+runs), "every round's Write took the rendezvous")
	}
}
