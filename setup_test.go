package rdma

import (
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// residentPages counts the pages of b that are in memory.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno, "mincore")
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// A connection's first small writes and the peer's first writes into its
// ring touch one page of its memory block between them: the send buffer's
// last half page and the ring's first half page are one page, where its
// send positions start. On soft, which leaves the block's pages alone
// until they are used, a connection that exchanged small messages holds
// one page of it, not two; every page a setup touches for the first time
// is a page fault on its path.
func TestFirstWritesShareAPage(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		ln := listen(t, nil)
		c, s := testsupport.Connect(t, ln, dialer(ln, softConfig()))
		msg := make([]byte, 100)
		for i := range 3 {
			_, err := c.Write(msg)
			require.NoError(t, err)
			_, err = io.ReadFull(s, msg)
			require.NoError(t, err, "round %d", i)
			_, err = s.Write(msg)
			require.NoError(t, err)
			_, err = io.ReadFull(c, msg)
			require.NoError(t, err)
		}
		for _, conn := range []net.Conn{c, s} {
			cn := conn.(*Conn)
			assert.Equal(t, 1, residentPages(t, cn.c.EP.Mem.Bytes()), "resident pages of a memory block")
			page := uint64(os.Getpagesize())
			assert.Equal(t, verbs.AddrOf(cn.c.Ring)/page, (verbs.AddrOf(cn.c.SB.Buf)+sendq.Start(len(cn.c.SB.Buf)))/page,
				"the ring's start and the first send position are one page")
		}
		// A write larger than what is left before the send buffer's end
		// starts at its beginning, and arrives whole.
		big := make([]byte, 3*os.Getpagesize())
		for i := range big {
			big[i] = byte(i)
		}
		go func() { _, _ = c.Write(big) }()
		got := make([]byte, len(big))
		_, err := io.ReadFull(s, got)
		require.NoError(t, err)
		assert.Equal(t, big, got)
	})
}

// A soft connection's watch (its keepalive, heartbeats and connection
// manager events) runs on a timer, not on a goroutine of its own: an idle
// soft endpoint has one goroutine, the provider's receiver.
func TestSoftConnGoroutines(t *testing.T) {
	const pairs = 40
	needFDs(t, 8*pairs+256)
	softTransports(t, func(t *testing.T, env []string) {
		ln := listen(t, nil)
		d := dialer(ln, softConfig())
		echoed := func() {
			c, s := testsupport.Connect(t, ln, d)
			go echoOne(s)
			_, err := c.Write([]byte{1})
			require.NoError(t, err)
			_, err = io.ReadFull(c, make([]byte, 1))
			require.NoError(t, err)
		}
		echoed()
		settled := func() int {
			// The echoes' goroutines end just after the last byte.
			time.Sleep(50 * time.Millisecond)
			return runtime.NumGoroutine()
		}
		before := settled()
		for range pairs {
			echoed()
		}
		per := float64(settled()-before) / (2 * pairs)
		t.Logf("%.2f goroutines per idle endpoint", per)
		// The shared-memory path has its liveness watcher besides.
		limit := 1.0
		if env[0] == "RDMA_SOFT_SHM=1" {
			limit = 2.0
		}
		assert.LessOrEqual(t, per, limit, "goroutines per idle endpoint")
	})
}

// Events the watch does not act on do not make it run: each run is a
// goroutine, and each of a soft listener's connections gets an
// EventEstablished once its peer's RTU arrives.
func TestTimedWatchSleepsThroughEstablished(t *testing.T) {
	cfg := softConfig()
	cfg.KeepAlive = -1
	cfg.PeerTimeout = -1 // no ticks: only events could run the watch
	c, s := pair(t, cfg)
	go io.Copy(s, s)
	_, err := c.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, 1))
	require.NoError(t, err) // s read it: the RTU before it, too
	time.Sleep(20 * cmwatch.EventDelay)
	for _, conn := range []*Conn{c, s} {
		assert.Zero(t, conn.c.Core.Watch.Runs(), "the watch ran")
	}
}

// The timed watch takes the connection manager's events: when the peer
// disconnects, the connection probes its QP (whose flush then fails it)
// though nothing reads or writes it, and no keepalive or heartbeat is due.
func TestTimedWatchTakesDisconnect(t *testing.T) {
	cfg := softConfig()
	cfg.KeepAlive = -1
	cfg.PeerTimeout = -1
	ln := listen(t, cfg)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	r, ev := dialRaw(t, ln, func(h hello) []byte { return h.marshal() })
	require.Equal(t, verbs.EventEstablished, ev.Type)
	var s *Conn
	select {
	case c := <-accepted:
		s = c.(*Conn)
		defer s.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
	require.True(t, s.c.Core.Watch.Timed(), "a soft connection's watch is the timer")
	s.c.Core.Mu.Lock()
	posted := s.c.SQ.Posted
	s.c.Core.Mu.Unlock()
	require.NoError(t, r.id.Disconnect())
	assert.Eventually(t, func() bool {
		s.c.Core.Mu.Lock()
		defer s.c.Core.Mu.Unlock()
		return s.c.SQ.Posted > posted
	}, 5*time.Second, 5*time.Millisecond, "no probe after the peer's disconnect")
}
