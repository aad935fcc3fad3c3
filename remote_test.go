package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

// sendDesc sends d over from's byte stream and returns what to reads: a
// Desc travels as 32 bytes in any message.
func sendDesc(t *testing.T, from, to *Conn, d Desc) Desc {
	t.Helper()
	go from.Write(d[:])
	var got Desc
	to.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadFull(to, got[:])
	require.NoError(t, err)
	to.SetReadDeadline(time.Time{})
	return got
}

// fill sets every byte of p to v.
func fill(p []byte, v byte) {
	for i := range p {
		p[i] = v
	}
}

// The peer writes into and reads from a range the server exposed, with
// and without notification, on both of soft's paths; every byte is
// checked, nothing outside the range moves, and the stream goes on beside.
func TestRemoteWriteRead(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		c, s := pair(t, nil)
		target := allocBuffer(t, 1<<20)
		fill(target.Bytes(), 0xee)
		d, err := s.Expose(target, 4096, 512<<10, AccessRead|AccessWrite)
		require.NoError(t, err)
		d = sendDesc(t, s, c, d)

		local := allocBuffer(t, 1<<20)
		for i := range local.Bytes() {
			local.Bytes()[i] = byte(i*7 + 1)
		}
		require.NoError(t, c.WriteRemote(d, 100, local.Bytes()[5:300005]))
		assert.True(t, bytes.Equal(local.Bytes()[5:300005], target.Bytes()[4096+100:4096+300100]))

		require.NoError(t, c.WriteRemoteNotify(d, 0, local.Bytes()[:16], 12345))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, n, err := s.WaitNotify(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint32(12345), v)
		assert.Equal(t, 16, n)
		assert.Equal(t, local.Bytes()[:16], target.Bytes()[4096:4096+16])
		// A notification alone.
		require.NoError(t, c.WriteRemoteNotify(d, 0, nil, NotifyValueMax))
		v, n, err = s.WaitNotify(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint32(NotifyValueMax), v)
		assert.Zero(t, n)

		for i := range target.Bytes() {
			target.Bytes()[i] = byte(i * 3)
		}
		clear(local.Bytes())
		require.NoError(t, c.ReadRemote(d, 7, local.Bytes()[:512<<10-7]))
		assert.True(t, bytes.Equal(target.Bytes()[4096+7:4096+512<<10], local.Bytes()[:512<<10-7]))
		require.NoError(t, c.ReadRemote(d, 0, nil), "reading nothing")

		for _, b := range [][]byte{target.Bytes()[:4096], target.Bytes()[4096+512<<10:]} {
			for i := range b {
				b[i] = byte(i * 3)
			}
		}
		fill(local.Bytes(), 0x11)
		require.NoError(t, c.WriteRemote(d, 512<<10-1000, local.Bytes()[:1000]))
		assert.Equal(t, byte(0x11), target.Bytes()[4096+512<<10-1])
		assert.Equal(t, byte(0), target.Bytes()[4096+512<<10], "the byte after the range")

		go c.Write([]byte("still a stream"))
		buf := make([]byte, 14)
		_, err = io.ReadFull(s, buf)
		require.NoError(t, err)
		assert.Equal(t, "still a stream", string(buf))
		require.NoError(t, s.Unexpose(d))
	})
}

// Several goroutines write and read their own parts of one exposure at
// once, and notify; every notification arrives, in each writer's order.
func TestRemoteConcurrent(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 64<<10)
	d, err := s.Expose(target, 0, 64<<10, AccessRead|AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 64<<10)
	const writers, rounds = 8, 40 // 320 notifications, beyond the receive depth
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := g * 8192
			for round := 0; round < rounds; round++ {
				part := local.Bytes()[off : off+4096]
				for i := range part {
					part[i] = byte(g + round + i)
				}
				if err := c.WriteRemoteNotify(d, off, part, uint32(g<<16|round)); err != nil {
					t.Error(err)
					return
				}
				if err := c.ReadRemote(d, off, local.Bytes()[off+4096:off+8192]); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(part, local.Bytes()[off+4096:off+8192]) {
					t.Errorf("goroutine %d round %d: read back differs", g, round)
					return
				}
			}
		}()
	}
	next := make([]int, writers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k := 0; k < writers*rounds; k++ {
		v, n, err := s.WaitNotify(ctx)
		require.NoError(t, err)
		require.Equal(t, 4096, n)
		g, round := int(v>>16), int(v&0xffff)
		require.Equal(t, next[g], round, "a writer's notifications arrive in order")
		next[g]++
	}
	wg.Wait()
}

// Mistakes fail locally with clear errors, before anything is sent, and
// break nothing.
func TestRemoteLocalErrors(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 8192)
	ro, err := s.Expose(target, 0, 1024, AccessRead)
	require.NoError(t, err)
	local := allocBuffer(t, 8192)
	heap := make([]byte, 64)

	for name, f := range map[string]func() error{
		"access 0":     func() error { _, err := s.Expose(target, 0, 64, 0); return err },
		"access 4":     func() error { _, err := s.Expose(target, 0, 64, 4); return err },
		"nil buffer":   func() error { _, err := s.Expose(nil, 0, 64, AccessRead); return err },
		"empty":        func() error { _, err := s.Expose(target, 0, 0, AccessRead); return err },
		"beyond":       func() error { _, err := s.Expose(target, 8000, 200, AccessRead); return err },
		"negative":     func() error { _, err := s.Expose(target, -1, 2, AccessRead); return err },
		"notify value": func() error { return c.WriteRemoteNotify(ro, 0, nil, NotifyValueMax+1) },
		"not a Buffer": func() error { return c.ReadRemote(ro, 0, heap) },
	} {
		require.ErrorIs(t, f(), syscall.EINVAL, name)
	}
	require.ErrorContains(t, c.ReadRemote(ro, 0, heap), "does not lie in a Buffer")

	err = c.WriteRemote(ro, 0, local.Bytes()[:64])
	require.ErrorIs(t, err, ErrBadDesc)
	require.ErrorContains(t, err, "exposed for read, not write")
	err = c.ReadRemote(ro, 1000, local.Bytes()[:64])
	require.ErrorIs(t, err, ErrBadDesc)
	require.ErrorContains(t, err, "exceed the region's 1024 bytes")
	require.ErrorIs(t, c.ReadRemote(ro, -1, local.Bytes()[:64]), ErrBadDesc)
	var junk Desc
	require.ErrorIs(t, c.ReadRemote(junk, 0, local.Bytes()[:64]), ErrBadDesc)
	require.ErrorIs(t, s.Unexpose(junk), ErrBadDesc)
	require.ErrorIs(t, c.Unexpose(ro), ErrBadDesc, "only the exposing connection unexposes")
	var opErr *net.OpError
	require.ErrorAs(t, c.WriteRemote(ro, 0, local.Bytes()[:64]), &opErr)

	// None of that broke the connection.
	require.NoError(t, c.ReadRemote(ro, 0, local.Bytes()[:1024]))
	require.NoError(t, s.Unexpose(ro))
	require.ErrorIs(t, s.Unexpose(ro), ErrBadDesc, "twice")

	// A freed Buffer cannot be exposed.
	gone, err := AllocBuffer(4096)
	require.NoError(t, err)
	require.NoError(t, gone.Free())
	_, err = s.Expose(gone, 0, 64, AccessRead)
	require.ErrorContains(t, err, "buffer freed")
}

// The attacker: the peer forges its Desc (another rkey, a stretched
// range, another address, read rights on a write-only range) or uses one
// that was revoked or whose Buffer was freed, on both of soft's paths.
// The exposing side's device refuses each: the call fails with
// ErrRemoteAccess, the connection is broken on both sides, nothing beyond
// the exposed range is touched (nor read), and the listener's other
// connections go on.
func TestRemoteAttacker(t *testing.T) {
	forge := map[string]func(d *Desc){
		"forged rkey": func(d *Desc) { d[24] ^= 0x5a; d[25] ^= 0x5a },
		"stretched": func(d *Desc) {
			binary.LittleEndian.PutUint64(d[16:], 1<<20)
		},
		"longer range": func(d *Desc) {
			binary.LittleEndian.PutUint64(d[16:], 1<<20)
			binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(d[8:])+1024)
		},
		"read not given": func(d *Desc) { d[5] = byte(AccessRead | AccessWrite) },
		"other address":  func(d *Desc) { binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(d[8:])+4096) },
		"revoked":        nil,
		"freed":          nil,
	}
	softTransports(t, func(t *testing.T, _ []string) {
		ln := listen(t, nil)
		for name, f := range forge {
			t.Run(name, func(t *testing.T) {
				ac, as := testsupport.Connect(t, ln, dialer(ln, nil))
				attacker, srv := ac.(*Conn), as.(*Conn)
				secret, err := AllocBuffer(8192)
				require.NoError(t, err)
				freed := false
				defer func() {
					if !freed {
						require.NoError(t, secret.Free())
					}
				}()
				fill(secret.Bytes(), 0xee)
				d, err := srv.Expose(secret, 0, 1024, AccessWrite)
				require.NoError(t, err)
				d = sendDesc(t, srv, attacker, d)
				switch {
				case name == "freed":
					require.NoError(t, secret.Free())
					freed = true
					require.ErrorIs(t, srv.Unexpose(d), ErrBadDesc, "gone with the Buffer")
				case f == nil:
					require.NoError(t, srv.Unexpose(d))
				default:
					f(&d)
				}
				local := allocBuffer(t, 1<<20)
				fill(local.Bytes(), 0x77)
				if name == "read not given" {
					clear(local.Bytes())
					err = attacker.ReadRemote(d, 0, local.Bytes()[:1024])
				} else {
					n := 512
					if binary.LittleEndian.Uint64(d[16:]) > 1024 {
						n = 4096 // beyond the range, within the claim
					}
					err = attacker.WriteRemote(d, 512, local.Bytes()[:n])
				}
				require.ErrorIs(t, err, ErrRemoteAccess)
				require.ErrorIs(t, err, syscall.EACCES)
				if !freed {
					for i, b := range secret.Bytes() {
						if b != 0xee {
							t.Fatalf("byte %d changed", i)
						}
					}
				}
				if name == "read not given" {
					assert.Equal(t, make([]byte, 1024), local.Bytes()[:1024], "nothing was read")
				}
				_, err = attacker.Write([]byte("x"))
				require.Error(t, err, "the attacker's connection is broken")
				srv.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = srv.Read(make([]byte, 8))
				require.Error(t, err, "so is the attacked side's")
				assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
				_, _, err = srv.WaitNotify(context.Background())
				require.Error(t, err)
			})
		}
		testsupport.Serves(t, ln, dialer(ln, nil))
	})
}

// A peer keeps a large ReadRemote in flight while the exposing side
// unexposes: Unexpose returns promptly, the peer's read fails, and none
// of what the memory holds after Unexpose reaches the peer.
func TestRemoteStalledAcrossUnexpose(t *testing.T) {
	const size = 64 << 20
	softTransports(t, func(t *testing.T, _ []string) {
		for attempt := 0; ; attempt++ {
			c, s := pair(t, nil)
			secret := allocBuffer(t, size)
			fill(secret.Bytes(), 0xaa)
			d, err := s.Expose(secret, 0, size, AccessRead)
			require.NoError(t, err)
			dst := allocBuffer(t, size)
			errc := make(chan error, 1)
			go func() { errc <- c.ReadRemote(d, 0, dst.Bytes()) }()
			// Once the first bytes landed, the READ is under way.
			for end := time.Now().Add(10 * time.Second); dst.Bytes()[0] == 0; time.Sleep(50 * time.Microsecond) {
				require.True(t, time.Now().Before(end), "the READ does not start")
			}
			began := time.Now()
			require.NoError(t, s.Unexpose(d))
			took := time.Since(began)
			fill(secret.Bytes(), 0xbb)
			err = <-errc
			assert.Less(t, took, time.Second, "Unexpose waits for the peer")
			assert.Equal(t, -1, bytes.IndexByte(dst.Bytes(), 0xbb), "bytes from after Unexpose reached the peer")
			if err == nil {
				// The READ finished before Unexpose: nothing to see; the
				// next, with the same size, catches it mid-way.
				require.Less(t, attempt, 5, "every READ finished before Unexpose")
				continue
			}
			t.Logf("Unexpose took %v; the READ: %v", took, err)
			assert.NotEqual(t, byte(0xaa), dst.Bytes()[size-1], "a failed READ did not complete")
			_, err = c.Write([]byte("x"))
			require.Error(t, err, "the reader's connection is broken")
			return
		}
	})
}

// WaitNotify ends with its context: cancelled, or past its deadline,
// whether or not it holds the poll role; and with the connection.
func TestRemoteWaitNotifyContext(t *testing.T) {
	c, s := pair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := s.WaitNotify(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())

	// Two waiters: one holds the poll role, the other waits for it.
	errc := make(chan error, 2)
	ctx, cancel = context.WithCancel(context.Background())
	for i := 0; i < 2; i++ {
		go func() {
			_, _, err := s.WaitNotify(ctx)
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	for i := 0; i < 2; i++ {
		select {
		case err := <-errc:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(500 * time.Millisecond):
			t.Fatal("WaitNotify ignores its context's cancellation")
		}
	}

	go func() {
		_, _, err := s.WaitNotify(context.Background())
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.CloseWrite())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, syscall.EPIPE, "the peer closed its sending side")
	case <-time.After(5 * time.Second):
		t.Fatal("WaitNotify outlives the peer's sending side")
	}
}

// Close ends the exposures and the Buffers' registrations; a one-sided
// operation on a closed connection fails cleanly; the Buffers are free
// to go.
func TestRemoteClose(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 4096)
	d, err := s.Expose(target, 0, 4096, AccessRead|AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 4096)
	require.NoError(t, c.WriteRemote(d, 0, local.Bytes()[:64]))
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.WriteRemote(d, 0, local.Bytes()[:64]), net.ErrClosed)
	require.ErrorIs(t, c.ReadRemote(d, 0, local.Bytes()[:64]), net.ErrClosed)
	_, _, err = c.WaitNotify(context.Background())
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = c.Expose(local, 0, 64, AccessRead)
	require.ErrorIs(t, err, net.ErrClosed)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Unexpose(d), net.ErrClosed)
	assert.Zero(t, target.b.Holders(), "Close dropped the connection's registrations")
}

// Close during one-sided operations in flight: each returns, and the
// Buffers it used are released with the queue pair.
func TestRemoteCloseInFlight(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 16<<20)
	d, err := s.Expose(target, 0, 16<<20, AccessRead|AccessWrite)
	require.NoError(t, err)
	local, err := AllocBuffer(16 << 20)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var err error
				if g%2 == 0 {
					err = c.ReadRemote(d, 0, local.Bytes()[g<<22:(g+1)<<22])
				} else {
					err = c.WriteRemote(d, 0, local.Bytes()[g<<22:(g+1)<<22])
				}
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, c.Close())
	wg.Wait()
	require.NoError(t, local.Free(), "released with the queue pair")
}

// WriteRemote and ReadRemote allocate nothing.
func TestRemoteZeroAllocs(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 4096)
	d, err := s.Expose(target, 0, 4096, AccessRead|AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 4096)
	// A connection that talks moves to shared memory after a few frames,
	// in the background (its rings are made then): measure once it has.
	var werr error
	require.Eventually(t, func() bool {
		if werr = c.WriteRemote(d, 0, local.Bytes()[:64]); werr != nil {
			return true
		}
		return settled(c) && settled(s)
	}, 10*time.Second, time.Millisecond, "the conn moves to shared memory")
	require.NoError(t, werr)
	allocs := testing.AllocsPerRun(200, func() {
		if err := c.WriteRemote(d, 0, local.Bytes()[:64]); err != nil {
			panic(err)
		}
		if err := c.ReadRemote(d, 64, local.Bytes()[64:128]); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}

// More notifications than the receive depth, from several goroutines
// while the stream flows both ways beside them, all arrive, each writer's
// in order: each holds its receive credit only until taken, and the
// stream's own credits are not starved by them.
func TestRemoteNotifyBeyondDepth(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 4096)
	d, err := s.Expose(target, 0, 4096, AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 4096)

	const writers, each = 4, 200 // 800 > the default receive depth of 128
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := c.WriteRemoteNotify(d, w*8, local.Bytes()[w*8:w*8+8], uint32(w<<16|i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() {
		for i := 0; i < 100; i++ {
			c.Write(make([]byte, 1000))
		}
	}()
	next := make([]int, writers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k := 0; k < writers*each; k++ {
		v, n, err := s.WaitNotify(ctx)
		require.NoError(t, err)
		require.Equal(t, 8, n)
		w, i := int(v>>16), int(v&0xffff)
		require.Equal(t, next[w], i, "a writer's notifications arrive in order")
		next[w]++
	}
	wg.Wait()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(s, make([]byte, 100*1000))
	require.NoError(t, err)
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	_, _, err = s.WaitNotify(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A peer that never takes its notifications cannot hold WriteRemoteNotify
// past the write deadline: the call that finds no credit returns a
// timeout having posted nothing, the connection goes on, and once the peer
// takes what came, every notification that was reported sent arrives, in
// order, and nothing else.
func TestRemoteNotifyWriteDeadline(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 4096)
	d, err := s.Expose(target, 0, 4096, AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 4096)

	require.NoError(t, c.SetWriteDeadline(time.Now().Add(300*time.Millisecond)))
	sent := 0
	for ; sent < 100000; sent++ {
		err = c.WriteRemoteNotify(d, 0, local.Bytes()[:8], uint32(sent))
		if err != nil {
			break
		}
	}
	require.Error(t, err, "a peer that takes no notification holds the writer only until its deadline")
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.Positive(t, sent)

	require.NoError(t, c.SetWriteDeadline(time.Time{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < sent; i++ {
		v, n, err := s.WaitNotify(ctx)
		require.NoError(t, err)
		require.Equal(t, uint32(i), v)
		require.Equal(t, 8, n)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	_, _, err = s.WaitNotify(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the timed-out call posted nothing")

	// The connection goes on: a notification and the byte stream.
	require.NoError(t, c.WriteRemoteNotify(d, 0, local.Bytes()[:8], 7))
	v, _, err := s.WaitNotify(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint32(7), v)
	go c.Write([]byte("on"))
	got := make([]byte, 2)
	_, err = io.ReadFull(s, got)
	require.NoError(t, err)
	assert.Equal(t, "on", string(got))
}

// Notifications hold the peer's receive credits until its WaitNotify takes
// them, but never the last ones the heartbeat needs: a peer whose program
// takes none for longer than PeerTimeout, while its connection answers
// pings, leaves the connection alive, as a TCP peer that does not read for
// a while does.
func TestRemoteNotifyFloodKeepsHeartbeat(t *testing.T) {
	cfg := softConfig()
	cfg.PeerTimeout = 500 * time.Millisecond
	c, s := pair(t, cfg)
	target := allocBuffer(t, 4096)
	d, err := s.Expose(target, 0, 4096, AccessWrite)
	require.NoError(t, err)
	local := allocBuffer(t, 4096)

	sent := make(chan int, 1)
	go func() {
		n := 0
		for c.WriteRemoteNotify(d, 0, local.Bytes()[:8], uint32(n)) == nil {
			n++
		}
		sent <- n
	}()
	time.Sleep(4 * cfg.PeerTimeout) // every credit taken, the peer's program asleep
	assert.Empty(t, c.Stats().Err, "the connection is alive")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, err := s.WaitNotify(ctx)
	require.NoError(t, err, "the notifications are there")
	assert.Zero(t, v)
	require.NoError(t, c.Close())
	<-sent
}
