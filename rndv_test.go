package rdma

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"github.com/rdmanet/rdma/internal/streamconn"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/zerocopy"
	"github.com/rdmanet/rdma/verbs/soft"
)

// lowRndv lowers the rendezvous floor to 4 KiB for the test, and returns
// a Config whose threshold is that.
func lowRndv(t *testing.T) *Config {
	prev := zerocopy.SetRendezvousFloor(4 << 10)
	t.Cleanup(func() { zerocopy.SetRendezvousFloor(prev) })
	cfg := softConfig()
	cfg.RendezvousThreshold = 4 << 10
	return cfg
}

func allocBuffer(t testing.TB, n int) *Buffer {
	t.Helper()
	b, err := AllocBuffer(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Free()) })
	return b
}

// A Write from a Buffer moves by rendezvous (nothing goes through the
// writer's send buffer), and arrives whole whatever the reader's slices:
// a Buffer, small pieces of one, the Go heap in odd sizes.
func TestRndvReads(t *testing.T) {
	softTransports(t, func(t *testing.T, _ []string) {
		c, s := pair(t, lowRndv(t))
		src := allocBuffer(t, 3<<20+123)
		crand.Read(src.Bytes())
		dstBuf := allocBuffer(t, len(src.Bytes()))
		for _, tc := range []struct {
			name  string
			dst   []byte
			piece int
		}{
			{"into a Buffer", dstBuf.Bytes(), len(dstBuf.Bytes())},
			{"into a Buffer, 20000 at a time", dstBuf.Bytes(), 20000},
			{"into a Buffer, 777 at a time", dstBuf.Bytes(), 777},
			{"into the heap, 777 at a time", make([]byte, len(src.Bytes())), 777},
			{"into the heap at once", make([]byte, len(src.Bytes())), len(src.Bytes())},
		} {
			t.Run(tc.name, func(t *testing.T) {
				clear(tc.dst)
				sb := c.c.SB.Tail
				sent, recv := c.Stats().BytesSent, s.Stats().BytesReceived
				errc := make(chan error, 1)
				go func() {
					_, err := c.Write(src.Bytes())
					errc <- err
				}()
				for off := 0; off < len(tc.dst); {
					n, err := s.Read(tc.dst[off:min(len(tc.dst), off+tc.piece)])
					require.NoError(t, err)
					off += n
				}
				require.NoError(t, <-errc)
				require.True(t, bytes.Equal(src.Bytes(), tc.dst))
				assert.Equal(t, sb, c.c.SB.Tail, "the writer copied nothing")
				// Stats count a rendezvous' bytes as a copied Write's.
				assert.Equal(t, sent+uint64(len(src.Bytes())), c.Stats().BytesSent)
				assert.Equal(t, recv+uint64(len(src.Bytes())), s.Stats().BytesReceived)
			})
		}
		// Small writes from the heap and a Buffer before and after: the
		// stream keeps its order.
		_, err := c.Write([]byte("head"))
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(src.Bytes()[:10000])
			errc <- err
		}()
		got := make([]byte, 4+10000)
		_, err = io.ReadFull(s, got)
		require.NoError(t, err)
		require.NoError(t, <-errc)
		assert.Equal(t, "head", string(got[:4]))
		assert.True(t, bytes.Equal(src.Bytes()[:10000], got[4:]))
	})
}

// Free while a Write uses the Buffer fails with EBUSY and changes nothing;
// once the Write returned it succeeds, and conns that used the Buffer go
// on.
func TestBufferFreeBusy(t *testing.T) {
	c, s := pair(t, lowRndv(t))
	b, err := AllocBuffer(1 << 20)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(b.Bytes())
		errc <- err
	}()
	// The Write waits for the reader: the Buffer is in use.
	require.Eventually(t, func() bool {
		c.c.Core.Mu.Lock()
		defer c.c.Core.Mu.Unlock()
		return c.c.TX.Rndv.Out
	}, 5*time.Second, time.Millisecond)
	err = b.Free()
	assert.ErrorIs(t, err, ErrBufferBusy)
	assert.ErrorIs(t, err, syscall.EBUSY)
	_, err = io.ReadFull(s, make([]byte, 1<<20))
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.NoError(t, b.Free())
	require.NoError(t, b.Free(), "twice is a no-op")
	c.c.Core.Mu.Lock()
	assert.Zero(t, c.c.ZC.Regs.Len(), "Free deregistered it from the conn")
	c.c.Core.Mu.Unlock()
	_, err = c.Write([]byte("on"))
	require.NoError(t, err)
	_, err = io.ReadFull(s, make([]byte, 2))
	require.NoError(t, err)
}

// A Write whose deadline passes mid-rendezvous (the reader does not read)
// returns a timeout, revokes the range and fails the connection; the
// reader then fails too rather than read the revoked range or see EOF.
func TestRndvWriteDeadline(t *testing.T) {
	c, s := pair(t, lowRndv(t))
	b := allocBuffer(t, 1<<20)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := c.Write(b.Bytes())
	assert.Zero(t, n)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	_, err = c.Write([]byte("x"))
	assert.Error(t, err)
	// The provider may still be sending READ responses from it until the
	// queue pair goes: Free waits for Close.
	assert.ErrorIs(t, b.Free(), ErrBufferBusy)
	c.Close()
	require.NoError(t, b.Free())
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(s)
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
}

// Close of the writer mid-rendezvous returns the Write with net.ErrClosed
// and the peer's Read fails (it is never left hanging nor handed EOF).
func TestRndvCloseMidTransfer(t *testing.T) {
	c, s := pair(t, lowRndv(t))
	b := allocBuffer(t, 1<<20)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(b.Bytes())
		errc <- err
	}()
	require.Eventually(t, func() bool {
		c.c.Core.Mu.Lock()
		defer c.c.Core.Mu.Unlock()
		return c.c.TX.Rndv.Out
	}, 5*time.Second, time.Millisecond)
	c.Close()
	err := <-errc
	require.Error(t, err)
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(s)
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
}

// A rendezvous after the stream has grown the send buffer and the ring
// (the descriptor's staging outlives the first send buffer's
// registration), read through WriteTo as well as Read.
func TestRndvAfterGrowth(t *testing.T) {
	for _, pre := range []int{0, 100, 70000, 5 << 20} {
		c, s := pair(t, lowRndv(t))
		mid := allocBuffer(t, 300<<10)
		crand.Read(mid.Bytes())
		errc := make(chan error, 1)
		go func() {
			if _, err := c.Write(make([]byte, pre)); err != nil {
				errc <- err
				return
			}
			_, err := c.Write(mid.Bytes())
			if err == nil {
				err = c.CloseWrite()
			}
			errc <- err
		}()
		var got bytes.Buffer
		_, err := io.Copy(onlyWriter{&got}, s)
		require.NoError(t, err, "after %d bytes", pre)
		require.NoError(t, <-errc)
		require.True(t, bytes.Equal(mid.Bytes(), got.Bytes()[pre:]), "after %d bytes", pre)
	}
}

// Stats counts the rendezvous: the writer the transfers it announced and
// those it exposed through its memory window, the reader those it read.
func TestRndvStats(t *testing.T) {
	for _, windows := range []bool{true, false} {
		name := "window"
		if !windows {
			name = "registration"
		}
		t.Run(name, func(t *testing.T) {
			defer setNoWindows(setNoWindows(!windows))
			c, s := pair(t, lowRndv(t))
			src := allocBuffer(t, 64<<10)
			crand.Read(src.Bytes())
			got := make([]byte, len(src.Bytes()))
			done := make(chan error, 1)
			go func() {
				_, err := io.ReadFull(s, got)
				done <- err
			}()
			for range 3 {
				_, err := c.Write(src.Bytes())
				require.NoError(t, err)
				require.NoError(t, <-done)
				go func() {
					_, err := io.ReadFull(s, got)
					done <- err
				}()
			}
			_, err := c.Write(make([]byte, len(got))) // from the heap: copied
			require.NoError(t, err)
			require.NoError(t, <-done)
			cs, ss := c.Stats(), s.Stats()
			assert.Equal(t, uint64(3), cs.RendezvousSent)
			assert.Equal(t, uint64(3), ss.RendezvousReceived)
			assert.Zero(t, cs.RendezvousReceived)
			want := uint64(0)
			if windows {
				want = 3
			}
			assert.Equal(t, want, cs.RendezvousWindowed)
		})
	}
}

// With the default Config a soft connection takes the rendezvous from 512
// KiB on either path; below that a Write from a Buffer copies.
func TestRndvSoftThreshold(t *testing.T) {
	softTransports(t, func(t *testing.T, env []string) {
		defer soft.SetSharedMemorySwitch(soft.SetSharedMemorySwitch(0))
		c, s := pair(t, softConfig())
		want := "soft-tcp"
		if env[0] == "RDMA_SOFT_SHM=1" {
			want = "soft-shm"
		}
		require.Eventually(t, func() bool { return c.Stats().Path == want }, 5*time.Second, time.Millisecond)
		src := allocBuffer(t, 1<<20)
		crand.Read(src.Bytes())
		got := make([]byte, 1<<20)
		sent := uint64(0)
		for _, n := range []int{256 << 10, 512 << 10, 1 << 20} {
			done := make(chan error, 1)
			go func() {
				_, err := io.ReadFull(s, got[:n])
				done <- err
			}()
			_, err := c.Write(src.Bytes()[:n])
			require.NoError(t, err)
			require.NoError(t, <-done)
			require.Equal(t, src.Bytes()[:n], got[:n])
			if n >= streamconn.SoftRndvThreshold {
				sent++
			}
			assert.Equal(t, sent, c.Stats().RendezvousSent, "%s, %d KiB", want, n>>10)
		}
	})
}
