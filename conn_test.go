package rdma

import (
	"bytes"
	crand "crypto/rand"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	c.c.Core.Mu.Lock()
	posted := c.c.SQ.Posted
	c.c.Core.Mu.Unlock()
	// One write per chunk (a 64 KiB chunk holds a whole write), a piece at
	// each ring wrap, and credit updates: far below two per write.
	assert.Less(t, posted, uint64(2*count), "send WRs for %d writes", count)
}

// With PollTime set, Read and Write busy-poll the CQ before sleeping; the
// data is the same either way.
func TestPollTime(t *testing.T) {
	cfg := softConfig()
	cfg.PollTime = 50 * time.Microsecond
	cfg.RingSize = 16 << 10
	c, s := pair(t, cfg)
	go io.Copy(s, s)
	echoStream(t, c, 1<<20, 3000)
}

// echoStream writes n random bytes to c in writes of chunk bytes while it
// reads them back from c's echoing peer, and requires them intact and in
// order.
func echoStream(t *testing.T, c net.Conn, n, chunk int) {
	t.Helper()
	want := make([]byte, n)
	crand.Read(want)
	go func() {
		for off := 0; off < len(want); off += chunk {
			if _, err := c.Write(want[off:min(len(want), off+chunk)]); err != nil {
				return
			}
		}
	}()
	got := make([]byte, len(want))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the stream is intact")
}

// Both ends' QPs carry the transport timeout and retry count chosen before
// connecting (an RTS QP refuses them), so a peer that stops answering is
// declared dead after 8 tries of 268 ms, not rdma_cm's 34 s.
func TestConnTransportTimeout(t *testing.T) {
	client, server := pair(t, softConfig())
	for _, c := range []*Conn{client, server} {
		a, err := c.c.EP.QP.Query()
		require.NoError(t, err)
		assert.Equal(t, ackTimeoutExp, a.Timeout)
		assert.Equal(t, 7, a.RetryCnt)
	}
}
