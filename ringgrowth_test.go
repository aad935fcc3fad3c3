package rdma

import (
	"github.com/rdmanet/rdma/internal/streamconn"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// ringSizes is what a connection has registered for its ring and send
// buffer now, and whether an old ring or send buffer is still held.
func ringSizes(c *Conn) (ring, sbuf int, held bool) {
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	held = c.c.Grow != nil && c.c.Grow.Held()
	return len(c.c.Ring), len(c.c.SB.Buf), held
}

// A connection starts small, stays small while it exchanges a few
// messages, grows to Config's sizes once it streams (both directions, the
// bytes intact across the move), and then holds nothing of the small
// blocks.
func TestRingsGrowUnderLoad(t *testing.T) {
	mem0 := verbs.MemoryInUse()
	c, s := pair(t, nil)
	perEndpoint := (verbs.MemoryInUse() - mem0) / 2
	assert.LessOrEqual(t, perEndpoint, int64(2*streamconn.GrowStart+16<<10), "registered per idle endpoint")
	for _, x := range []*Conn{c, s} {
		ring, sbuf, _ := ringSizes(x)
		assert.Equal(t, [2]int{streamconn.GrowStart, streamconn.GrowStart}, [2]int{ring, sbuf})
	}

	// Small messages back and forth: nothing grows.
	go io.Copy(s, s)
	msg := make([]byte, 1000)
	for range 50 {
		_, err := c.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(c, msg)
		require.NoError(t, err)
	}
	c.c.Core.Mu.Lock()
	assert.Nil(t, c.c.Grow, "a few messages do not grow a connection")
	c.c.Core.Mu.Unlock()

	// A stream through the echo: every byte comes back in order, across
	// the moves.
	echoStream(t, c, 8<<20, 50000)

	cfg := softConfig().withDefaults()
	for name, x := range map[string]*Conn{"dialer": c, "listener": s} {
		assert.Eventually(t, func() bool {
			ring, sbuf, held := ringSizes(x)
			return ring == cfg.RingSize && sbuf == cfg.SendBufferSize && !held
		}, 5*time.Second, time.Millisecond, "%s: grown, old blocks released", name)
	}
	c.Close()
	s.Close()
	assert.Eventually(t, func() bool { return verbs.MemoryInUse() <= mem0 }, 5*time.Second, time.Millisecond,
		"every block freed at close")
}

// A listener answers a peer of protocol version 2, which knows no ring
// moves, with a ring of RingSize at once, and counts credits in that
// ring's unit; such a peer's ring offer is a protocol breach.
func TestOldPeerGetsFullRing(t *testing.T) {
	ln := listen(t, softConfig())
	r, s := acceptRaw(t, ln, func(h hello) []byte { h.version = 2; return h.marshal() })
	assert.Equal(t, uint8(2), r.peer.version)
	assert.Equal(t, stream.RingLog(defaultRingSize), r.peer.ringLog)
	ring, _, _ := ringSizes(s)
	assert.Equal(t, defaultRingSize, ring)

	var m [stream.RingMsgLen]byte
	stream.RingMsg{Addr: r.mr.Addr(), Key: r.mr.RKey(), Log: 14}.Marshal(m[:])
	r.write(t, uint64(ring), m[:], immCtl(stream.CtlRing))
	readProtocolError(t, s)
}

// A peer's ring offers and writes into a new ring are checked like the
// rest of the stream: a ring larger than its hello announced, an offer
// while one is pending, data into a ring never offered: each fails the
// connection with a protocol error, and nothing is written where the
// offer pointed.
func TestBadRingOffers(t *testing.T) {
	ln := listen(t, softConfig())
	type step struct {
		off     uint64 // from the listener's ring start; mailbox: the ring's size
		payload []byte
		imm     uint32
	}
	offer := func(r *rawPeer, log uint8) []byte {
		var m [stream.RingMsgLen]byte
		stream.RingMsg{Addr: r.mr.Addr(), Key: r.mr.RKey(), Log: log}.Marshal(m[:])
		return m[:]
	}
	cases := map[string]func(r *rawPeer) []step{
		"larger than announced": func(r *rawPeer) []step {
			return []step{{streamconn.GrowStart, offer(r, rawRingLog+1), immCtl(stream.CtlRing)}}
		},
		"offer while one is pending": func(r *rawPeer) []step {
			return []step{
				{streamconn.GrowStart, offer(r, rawRingLog-2), immCtl(stream.CtlRing)},
				{streamconn.GrowStart, offer(r, rawRingLog-2), immCtl(stream.CtlRing)},
			}
		},
		"reserved bytes": func(r *rawPeer) []step {
			m := offer(r, rawRingLog-2)
			m[15] = 1
			return []step{{streamconn.GrowStart, m, immCtl(stream.CtlRing)}}
		},
		"data into a ring not offered": func(r *rawPeer) []step {
			return []step{{0, []byte("hello"), immData(5) | stream.ImmDataGen}}
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			r, s := acceptRaw(t, ln, marshalHello)
			for _, st := range steps(r) {
				r.write(t, st.off, st.payload, st.imm)
			}
			readProtocolError(t, s)
		})
	}
}

// A peer's offer is taken at the next write: the bytes land at the offered
// ring's start, and the write's immediate carries the flipped generation.
func TestRingOfferTaken(t *testing.T) {
	ln := listen(t, softConfig())
	r, s := acceptRaw(t, ln, marshalHello)
	const at = 32 << 10 // the new ring: 16 KiB and its mailbox, inside the raw peer's memory
	var m [stream.RingMsgLen]byte
	stream.RingMsg{Addr: r.mr.Addr() + at, Key: r.mr.RKey(), Log: 14}.Marshal(m[:])
	r.write(t, streamconn.GrowStart, m[:], immCtl(stream.CtlRing))
	// The offer is taken once applied: wait for the listener to see it.
	require.Eventually(t, func() bool {
		s.c.TryPoll()
		s.c.Core.Mu.Lock()
		defer s.c.Core.Mu.Unlock()
		return s.c.TX.Next.Log == 14
	}, 5*time.Second, time.Millisecond)
	_, err := s.Write([]byte("moved"))
	require.NoError(t, err)
	imms := r.recvImms(t, 500*time.Millisecond)
	require.NotEmpty(t, imms, "no write arrived")
	assert.Equal(t, uint32(5)|stream.ImmDataGen, imms[0])
	assert.Equal(t, "moved", string(r.mem.Bytes()[at:at+5]))
}

// An offer is not queued while a data write is reserved and not yet
// queued (the writer copies its bytes outside the lock): the reservation
// may have moved the connection to the peer's offered ring, and the peer
// looks for offers in the mailbox of the ring it knows us to write to,
// which that write tells it about. Queued ahead of it, the offer landed in
// the other mailbox and the peer failed the connection.
func TestOfferWaitsForReservedWrite(t *testing.T) {
	c, _ := pair(t, nil)
	c.c.Core.Mu.Lock()
	defer c.c.Core.Mu.Unlock()
	c.c.RX.Tail = streamconn.GrowAfterRings * c.c.RX.Size // as if the peer had streamed
	c.c.RX.Head, c.c.RX.Credited = c.c.RX.Tail, c.c.RX.Tail
	posted := c.c.SQ.Posted
	c.c.SQ.Reserved++ // a Write between its reservation and its queueing
	c.c.Growing().OfferRingLocked()
	assert.Zero(t, c.c.RX.Next, "no offer while a write is reserved")
	assert.Equal(t, posted, c.c.SQ.Posted)
	c.c.SQ.Reserved--
	c.c.Growing().OfferRingLocked()
	assert.Equal(t, uint64(defaultRingSize), c.c.RX.Next, "offered once the write is queued")
	assert.Equal(t, posted+1, c.c.SQ.Posted)
}
