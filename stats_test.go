package rdma

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs/soft"
)

// openIn returns the registry's entries whose local address is one of
// conns' (other tests' connections may be open too).
func openIn(conns ...net.Conn) []ConnStats {
	want := map[string]bool{}
	for _, c := range conns {
		want[c.LocalAddr().String()+">"+c.RemoteAddr().String()] = true
	}
	var out []ConnStats
	for _, s := range OpenConnStats() {
		if want[s.LocalAddr+">"+s.RemoteAddr] {
			out = append(out, s)
		}
	}
	return out
}

// The four fixed counters equal what was written and read, on each of
// soft's paths: 150 Writes of 64 B and 1 KiB (57,600 bytes, inside the
// first 64 KiB ring: one message each), then one Write of all of it back,
// split into chunks of a quarter of the 64 KiB ring: 4 messages.
func TestStatsExact(t *testing.T) {
	softTransports(t, func(t *testing.T, env []string) {
		// On shared memory, move at once (not after 64 KiB, in the middle
		// of what is counted) and wait for it, so that Path is one thing.
		prev := soft.SetSharedMemorySwitch(0)
		defer soft.SetSharedMemorySwitch(prev)
		before := ReadProcessStats().Totals
		c, s := pair(t, nil)
		want, carrier := "soft-tcp", "tcp"
		if env[0] == "RDMA_SOFT_SHM=1" {
			want, carrier = "soft-shm", "shm"
		}
		require.Eventually(t, func() bool { return SoftCarrier(c) == carrier && SoftCarrier(s) == carrier },
			10*time.Second, time.Millisecond, "both ends on %s", carrier)
		// The listener reads meanwhile: 150 messages are more than its
		// receives, which only a poll of its completions reposts.
		var got []byte
		var rerr error
		read := make(chan struct{})
		go func() {
			defer close(read)
			got = make([]byte, 100*64+50*1024)
			_, rerr = io.ReadFull(s, got)
		}()
		var sent bytes.Buffer
		for i := range 150 {
			size := 64
			if i >= 100 {
				size = 1024
			}
			msg := bytes.Repeat([]byte{byte(i)}, size)
			n, err := c.Write(msg)
			require.NoError(t, err)
			require.Equal(t, size, n)
			sent.Write(msg)
		}
		<-read
		require.NoError(t, rerr)
		require.Equal(t, sent.Bytes(), got)
		n, err := s.Write(got)
		require.NoError(t, err)
		require.Equal(t, len(got), n)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)

		cs, ss := c.Stats(), s.Stats()
		const total = 100*64 + 50*1024
		assert.Equal(t, [4]uint64{total, total, 150, 4}, [4]uint64{cs.BytesSent, cs.BytesReceived, cs.MessagesSent, cs.MessagesReceived}, "dialer: bytes sent, received, messages sent, received")
		assert.Equal(t, [4]uint64{total, total, 4, 150}, [4]uint64{ss.BytesSent, ss.BytesReceived, ss.MessagesSent, ss.MessagesReceived}, "listener")
		assert.Equal(t, uint64(150), cs.Writes)
		assert.Equal(t, uint64(1), ss.Writes)
		for _, x := range []ConnStats{cs, ss} {
			assert.Equal(t, want, x.Path)
			assert.Equal(t, ProviderSoft, x.Provider)
			assert.Equal(t, "stream", x.Wire)
			assert.Equal(t, x.Reads, x.ReadsAtOnce+x.ReadsHanded+x.ReadsSpun+x.ReadsSlept, "every Read that returned data is classified")
			assert.Equal(t, 64<<10, x.RingSize)
			assert.Equal(t, 64<<10, x.PeerRingSize)
			assert.Equal(t, 64<<10, x.SendBufferSize)
			assert.Zero(t, x.Buffered)
			assert.Empty(t, x.Err)
			assert.False(t, x.Opened.IsZero())
			assert.GreaterOrEqual(t, x.SinceSent, time.Duration(0), "a message was sent")
			assert.GreaterOrEqual(t, x.SinceRecv, time.Duration(0), "a message was received")
		}
		assert.Len(t, openIn(c, s), 2, "both ends in the registry while open")

		c.Close()
		s.Close()
		assert.Empty(t, openIn(c, s), "closed conns leave the registry")
		after := ReadProcessStats().Totals
		assert.Equal(t, uint64(2*total), after.BytesSent-before.BytesSent, "process totals keep what closed conns sent")
		assert.Equal(t, uint64(154), after.MessagesReceived-before.MessagesReceived)
		assert.Equal(t, uint64(2), after.Closed-before.Closed)
	})
}

// The one-sided counters equal what was done, on each of soft's paths: 5
// WriteRemote of 1000 bytes and 2 WriteRemoteNotify of 16, 3 ReadRemote
// of 700, 2 exposures (one ended); failed calls count nothing. The process
// totals keep them once the connections are closed.
func TestStatsRemoteExact(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		before := ReadProcessStats().Totals
		c, s := pair(t, nil)
		target := allocBuffer(t, 8192)
		d, err := s.Expose(target, 0, 4096, AccessRead|AccessWrite)
		require.NoError(t, err)
		d2, err := s.Expose(target, 4096, 4096, AccessRead)
		require.NoError(t, err)
		d = sendDesc(t, s, c, d)
		local := allocBuffer(t, 4096)
		for range 5 {
			require.NoError(t, c.WriteRemote(d, 0, local.Bytes()[:1000]))
		}
		for range 3 {
			require.NoError(t, c.ReadRemote(d, 100, local.Bytes()[:700]))
		}
		for i := range 2 {
			require.NoError(t, c.WriteRemoteNotify(d, 0, local.Bytes()[:16], uint32(i)))
		}
		require.Error(t, c.WriteRemote(d, 4000, local.Bytes()[:1000]), "beyond the range")
		require.Error(t, c.WriteRemote(d, 0, make([]byte, 10)), "not in a Buffer")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range 2 {
			_, _, err := s.WaitNotify(ctx)
			require.NoError(t, err)
		}
		require.NoError(t, s.Unexpose(d2))

		cs, ss := c.Stats(), s.Stats()
		assert.Equal(t, [6]uint64{7, 5*1000 + 2*16, 3, 3 * 700, 2, 0},
			[6]uint64{cs.RemoteWrites, cs.RemoteBytesWritten, cs.RemoteReads, cs.RemoteBytesRead, cs.NotifiesSent, cs.NotifiesReceived})
		assert.Equal(t, [6]uint64{0, 0, 0, 0, 0, 2},
			[6]uint64{ss.RemoteWrites, ss.RemoteBytesWritten, ss.RemoteReads, ss.RemoteBytesRead, ss.NotifiesSent, ss.NotifiesReceived})
		assert.Equal(t, uint64(2), ss.Exposures)
		assert.Equal(t, 1, ss.Exposed, "one of the two still exposed")
		assert.Zero(t, cs.Exposures)

		require.NoError(t, c.Close())
		require.NoError(t, s.Close())
		after := ReadProcessStats().Totals
		assert.Equal(t, [7]uint64{7, 5032, 3, 2100, 2, 2, 2}, [7]uint64{
			after.RemoteWrites - before.RemoteWrites, after.RemoteBytesWritten - before.RemoteBytesWritten,
			after.RemoteReads - before.RemoteReads, after.RemoteBytesRead - before.RemoteBytesRead,
			after.NotifiesSent - before.NotifiesSent, after.NotifiesReceived - before.NotifiesReceived,
			after.Exposures - before.Exposures})
	})
}

// The rsocket wire between two Go ends counts the same way.
func TestStatsRsocketExact(t *testing.T) {
	c, s := rsPair(t, nil)
	msg := make([]byte, 100)
	for range 40 {
		_, err := c.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(s, msg)
		require.NoError(t, err)
	}
	cs, ss := c.Stats(), s.Stats()
	assert.Equal(t, [4]uint64{4000, 0, 40, 0}, [4]uint64{cs.BytesSent, cs.BytesReceived, cs.MessagesSent, cs.MessagesReceived})
	assert.Equal(t, [4]uint64{0, 4000, 0, 40}, [4]uint64{ss.BytesSent, ss.BytesReceived, ss.MessagesSent, ss.MessagesReceived})
	assert.Equal(t, uint64(40), cs.Writes)
	assert.Equal(t, WireRsocket, cs.Wire)
	assert.Equal(t, ss.Reads, ss.ReadsAtOnce+ss.ReadsHanded+ss.ReadsSpun+ss.ReadsSlept)
	assert.Contains(t, []string{"soft-shm", "soft-tcp", ProviderRDMACore}, cs.Path)
	assert.Len(t, openIn(c, s), 2)
}

// A stream through an echo grows both rings and send buffers; a writer
// whose peer does not read waits for ring room, and the time is counted.
func TestStatsGrowthAndWaits(t *testing.T) {
	out := captureDebug(t, "INFO", "ring") // debuglog_test.go
	c, s := pair(t, nil)
	// The listener reads nothing for 100 ms: the dialer's 1 MiB Write
	// fills the 64 KiB ring and waits.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(100 * time.Millisecond)
		_, _ = io.CopyN(io.Discard, s, 1<<20)
	}()
	_, err := c.Write(make([]byte, 1<<20))
	require.NoError(t, err)
	wg.Wait()
	cs := c.Stats()
	assert.NotZero(t, cs.RingWaits+cs.CreditWaits+cs.SendBufferWaits, "waits counted")
	assert.GreaterOrEqual(t, cs.WriteWaitTime, 50*time.Millisecond, "the time waited")

	go io.Copy(s, s)
	echoStream(t, c, 8<<20, 50000)
	cfg := softConfig().withDefaults()
	assert.Eventually(t, func() bool {
		cs, ss := c.Stats(), s.Stats()
		return cs.RingGrowths == 1 && ss.RingGrowths == 1 && cs.SendBufferGrowths == 1 && ss.SendBufferGrowths == 1 &&
			cs.RingSize == cfg.RingSize && cs.SendBufferSize == cfg.SendBufferSize && cs.PeerRingSize == cfg.RingSize
	}, 5*time.Second, time.Millisecond, "dialer %+v", c.Stats())
	log := out.String()
	assert.Contains(t, log, "receive ring grew")
	assert.Contains(t, log, "send buffer grew")
	assert.Contains(t, log, "to=1048576")
}

// Many conns opened and closed leave nothing in the registry.
func TestStatsChurn(t *testing.T) {
	ln := listen(t, nil)
	base := len(OpenConnStats())
	var conns []net.Conn
	for range 20 {
		c, s := pairOn(t, ln)
		conns = append(conns, c, s)
	}
	assert.Len(t, openIn(conns...), 40)
	for _, c := range conns {
		c.Close()
	}
	assert.Empty(t, openIn(conns...))
	assert.Equal(t, base, len(OpenConnStats()))
}

func pairOn(t *testing.T, ln *Listener) (net.Conn, net.Conn) {
	acc := make(chan net.Conn, 1)
	go func() {
		s, _ := ln.Accept()
		acc <- s
	}()
	c := dial(t, ln, nil)
	s := <-acc
	require.NotNil(t, s)
	return c, s
}

// Stats allocates nothing on the data path: the zero-allocation tests
// (conntest's) run with the counters in; this one reads Stats while a
// ping-pong runs, for -race.
func TestStatsConcurrent(t *testing.T) {
	c, s := pair(t, nil)
	go io.Copy(s, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			_ = c.Stats()
			_ = s.Stats()
			_ = OpenConnStats()
			_ = ReadProcessStats()
		}
	}()
	msg := make([]byte, 64)
	for range 500 {
		_, err := c.Write(msg)
		require.NoError(t, err)
		_, err = io.ReadFull(c, msg)
		require.NoError(t, err)
	}
	<-done
	cs := c.Stats()
	assert.Equal(t, uint64(500*64), cs.BytesSent)
	assert.Equal(t, uint64(500), cs.MessagesSent)
	assert.Equal(t, uint64(500), cs.MessagesReceived)
}

// io.Copy through ReadFrom and WriteTo is counted as Write and Read are:
// every byte each way.
func TestStatsCopy(t *testing.T) {
	c, s := pair(t, nil)
	data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	done := make(chan error, 1)
	var got bytes.Buffer
	go func() {
		_, err := s.WriteTo(&got)
		done <- err
	}()
	n, err := c.ReadFrom(bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), n)
	require.NoError(t, c.CloseWrite())
	require.NoError(t, <-done)
	require.Equal(t, data, got.Bytes())
	cs, ss := c.Stats(), s.Stats()
	assert.Equal(t, uint64(len(data)), cs.BytesSent)
	assert.Equal(t, uint64(len(data)), ss.BytesReceived)
	assert.Positive(t, cs.Writes)
	assert.Equal(t, ss.Reads, ss.ReadsAtOnce+ss.ReadsHanded+ss.ReadsSpun+ss.ReadsSlept)
	assert.Positive(t, ss.Reads)
}
