package rdma

import (
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// sendSlots is the length of c's per-slot send queue arrays, checked to
// move together.
func sendSlots(t *testing.T, c *Conn) int {
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	n := len(c.c.SQ.WRs)
	require.Len(t, c.c.SQ.SGEs, n)
	require.Len(t, c.c.SQ.Ends, n)
	require.Len(t, c.c.SQ.Ops, n)
	return n
}

// senderGoroutines counts the soft QPs' sender goroutines in the process.
func senderGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "soft.(*qp).sender(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// noSenders waits for every soft QP's sender goroutine to end: one runs
// only while a write the transport could not take at once is pending.
func noSenders(t *testing.T, msg string) {
	t.Helper()
	assert.Eventually(t, func() bool { return senderGoroutines() == 0 }, 10*time.Second, 5*time.Millisecond, msg)
}

// An idle connection on the default Config holds a few send slots and no
// notification ring, whatever its depths, and its soft QP no sender
// goroutine; a burst of small writes grows
// the send queue (no further than the endpoint's slots), every byte
// arriving in order; Write and Read allocate nothing once it has grown; and
// once quiet, the connection gives the slots back.
func TestIdleConnQueuesFollowTraffic(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		c, s := pair(t, nil)
		_, err := c.Write([]byte{1})
		require.NoError(t, err)
		_, err = io.ReadFull(s, make([]byte, 1))
		require.NoError(t, err)
		for _, e := range []*Conn{c, s} {
			assert.Equal(t, sendq.StartSlots, sendSlots(t, e), "an idle conn's send slots")
			assert.Greater(t, e.c.Slots, 4*sendq.StartSlots, "the default depth is far above what idle holds")
			e.c.Core.Mu.Lock()
			assert.Zero(t, e.c.Notes.Slots(), "no notification ring before a notification")
			e.c.Core.Mu.Unlock()
		}
		noSenders(t, "an idle conn's QP has no sender goroutine")

		// Small writes, each its own WR: signaled ones are a quarter of
		// the queue apart, so more than the starting slots are
		// outstanding before the first completion can be taken.
		const msg, count = 100, 2000
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, msg)
			for i := range count {
				for j := range b {
					b[j] = byte(i + j)
				}
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
		got := make([]byte, msg*count)
		_, err = io.ReadFull(s, got)
		require.NoError(t, err)
		wg.Wait()
		for i := range count {
			for j := range msg {
				if got[i*msg+j] != byte(i+j) {
					require.Failf(t, "stream corrupted", "message %d byte %d: %d", i, j, got[i*msg+j])
				}
			}
		}
		n := sendSlots(t, c)
		assert.Greater(t, n, sendq.StartSlots, "the burst grew the send queue")
		assert.LessOrEqual(t, n, c.c.Slots, "no further than the endpoint's slots")
		noSenders(t, "the senders end once the burst is written")

		wbuf, small := make([]byte, 4096), make([]byte, 64)
		round := func() {
			if _, err := c.Write(wbuf); err != nil {
				panic(err)
			}
			if _, err := io.ReadFull(s, wbuf); err != nil {
				panic(err)
			}
			if _, err := s.Write(small); err != nil {
				panic(err)
			}
			if _, err := io.ReadFull(c, small); err != nil {
				panic(err)
			}
		}
		for range 100 {
			round()
		}
		assert.Zero(t, testing.AllocsPerRun(500, round), "allocations per Write/Read round after growth")

		// Quiet again: the watch's next ticks give the slots back.
		var moved uint64
		c.c.Keepalive() // a signaled probe behind any unsignaled tail
		assert.Eventually(t, func() bool {
			c.c.Growing().TrimIdle(&moved)
			c.c.Core.Mu.Lock()
			defer c.c.Core.Mu.Unlock()
			return len(c.c.SQ.WRs) == sendq.StartSlots && len(c.c.SQ.Ends) == sendq.StartSlots
		}, 10*time.Second, 5*time.Millisecond, "a quiet conn trims its send queue")
		for range 100 {
			round() // and grows again as traffic needs
		}
		assert.Greater(t, sendSlots(t, c), sendq.StartSlots, "unsignaled sends held by the queue again")
	})
}

// idleHeapLimit bounds the Go heap an idle endpoint (a connection has two)
// on the default Config may hold: about 16 KiB is measured (the Conn, the
// soft QP, CQ and CM ID, a few slots); with queues sized by the depths it
// was 65 KiB.
const idleHeapLimit = 32 << 10

// Connections that each echoed a byte and went idle hold at most
// idleHeapLimit of Go heap per endpoint, on both soft paths.
func TestIdleConnHeap(t *testing.T) {
	const pairs = 100
	needFDs(t, 8*pairs+256)
	softTransports(t, func(t *testing.T, _ []string) {
		ln := listen(t, nil)
		d := dialer(ln, softConfig())
		heap := func() uint64 {
			var ms runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		echoed := func() net.Conn {
			c, s := testsupport.Connect(t, ln, d)
			go echoOne(s)
			_, err := c.Write([]byte{1})
			require.NoError(t, err)
			_, err = io.ReadFull(c, make([]byte, 1))
			require.NoError(t, err)
			return c
		}
		// One pair first, so that what every connection shares (the
		// listener's, the provider's) is in the baseline.
		echoed()
		before := heap()
		conns := make([]net.Conn, 0, pairs)
		for range pairs {
			conns = append(conns, echoed())
		}
		per := (int64(heap()) - int64(before)) / (2 * pairs)
		runtime.KeepAlive(conns)
		t.Logf("%d B of Go heap per idle endpoint", per)
		assert.LessOrEqual(t, per, int64(idleHeapLimit), "Go heap per idle endpoint")
	})
}
