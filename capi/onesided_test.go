package capi

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func alloc(t *testing.T, c *Context, size int) *Mem {
	t.Helper()
	m, err := c.Alloc(size)
	require.NoError(t, err)
	return m
}

// A client writes into and reads from memory the server exposed to it, and
// is notified: every byte checked; requests complete; the stream goes on.
func TestOneSided(t *testing.T) {
	s := newStar(t, rdmaTransport, 2, 4096)
	target := alloc(t, s.server, 1<<16)
	d, err := s.server.Expose(0, target, 4096, 8192, AccessRead|AccessWrite)
	require.NoError(t, err)
	// The descriptor travels as a message.
	_, err = s.server.Send(0, d[:])
	require.NoError(t, err)
	var got Desc
	n, err := s.clients[0].Recv(0, got[:])
	require.NoError(t, err)
	require.Equal(t, DescSize, n)

	local := alloc(t, s.clients[0], 1<<16)
	for i := range local.Bytes() {
		local.Bytes()[i] = byte(i*7 + 1)
	}
	n, err = s.clients[0].Write(0, &got, 100, local, 5, 8000)
	require.NoError(t, err)
	assert.Equal(t, 8000, n)
	assert.True(t, bytes.Equal(local.Bytes()[5:8005], target.Bytes()[4096+100:4096+8100]))

	n, err = s.clients[0].WriteNotify(0, &got, 0, local, 0, 16, 12345)
	require.NoError(t, err)
	assert.Equal(t, 16, n)
	v, n, err := s.server.WaitNotify(0, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint32(12345), v)
	assert.Equal(t, 16, n)
	assert.Equal(t, local.Bytes()[:16], target.Bytes()[4096:4096+16])

	_, _, err = s.server.WaitNotify(1, 10*time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)

	for i := range target.Bytes() {
		target.Bytes()[i] = byte(i * 3)
	}
	reqs := make([]*Request, 8)
	for k := range reqs {
		reqs[k], err = s.clients[0].IRead(0, &got, k*1024, local, k*1024, 1024)
		require.NoError(t, err)
	}
	for _, r := range reqs {
		n, err := r.Wait()
		require.NoError(t, err)
		assert.Equal(t, 1024, n)
	}
	assert.True(t, bytes.Equal(target.Bytes()[4096:4096+8192], local.Bytes()[:8192]))
	r, err := s.clients[0].IWrite(0, &got, 0, local, 0, 8192)
	require.NoError(t, err)
	_, err = r.Wait()
	require.NoError(t, err)

	_, err = s.clients[0].Send(0, []byte("after"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	n, err = s.server.Recv(0, buf)
	require.NoError(t, err)
	assert.Equal(t, "after", string(buf[:n]))
	require.NoError(t, target.Free())
	require.NoError(t, target.Free(), "twice is a no-op")
}

// Several goroutines write and read at once, each its own slice.
func TestOneSidedConcurrent(t *testing.T) {
	s := newStar(t, rdmaTransport, 1, 4096)
	target := alloc(t, s.server, 64*1024)
	d, err := s.server.Expose(0, target, 0, 64*1024, AccessRead|AccessWrite)
	require.NoError(t, err)
	cl := s.clients[0]
	local := alloc(t, cl, 64*1024)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := g * 8192
			for round := 0; round < 20; round++ {
				part := local.Bytes()[off : off+4096]
				for i := range part {
					part[i] = byte(g + round + i)
				}
				if _, err := cl.Write(0, &d, off, local, off, 4096); err != nil {
					t.Error(err)
					return
				}
				if _, err := cl.Read(0, &d, off, local, off+4096, 4096); err != nil {
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
	wg.Wait()
}

// Bad arguments and descriptors fail locally with clear errors and break
// nothing.
func TestOneSidedLocalErrors(t *testing.T) {
	s := newStar(t, rdmaTransport, 1, 4096)
	srv, cl := s.server, s.clients[0]
	target := alloc(t, srv, 4096)
	ro, err := srv.Expose(0, target, 0, 1024, AccessRead)
	require.NoError(t, err)
	local := alloc(t, cl, 4096)
	other := alloc(t, srv, 64)

	_, err = srv.Alloc(0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = srv.Expose(0, target, 4000, 100, AccessRead)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = srv.Expose(0, target, 0, 100, 4)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = srv.Expose(5, target, 0, 100, AccessRead)
	require.ErrorIs(t, err, ErrNoSuchPeer)
	_, err = cl.Write(0, &ro, 0, local, 0, 64)
	require.ErrorIs(t, err, ErrBadDesc)
	require.ErrorContains(t, err, "exposed for read, not write")
	_, err = cl.Read(0, &ro, 1000, local, 0, 64)
	require.ErrorIs(t, err, ErrBadDesc)
	_, err = cl.Read(0, &ro, 0, local, 4090, 64)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = cl.Read(0, &ro, 0, other, 0, 64)
	require.ErrorContains(t, err, "another context")
	var junk Desc
	_, err = cl.Read(0, &junk, 0, local, 0, 64)
	require.ErrorIs(t, err, ErrBadDesc)
	_, err = cl.WriteNotify(0, &ro, 0, local, 0, 0, NotifyValueMax+1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorIs(t, cl.Unexpose(ro), ErrBadDesc, "only the exposing context unexposes")

	// None of that broke the connection.
	n, err := cl.Read(0, &ro, 0, local, 0, 1024)
	require.NoError(t, err)
	assert.Equal(t, 1024, n)
	require.NoError(t, local.Free())
	_, err = cl.Read(0, &ro, 0, local, 0, 64)
	require.ErrorIs(t, err, ErrMemFreed)
}

// The attacker: a client forges descriptors (another rkey, a longer range,
// read rights on a write-only range) or uses a revoked one. The server's
// device refuses each; the call fails with ErrRemoteAccess; the peer's
// connection is broken on both sides, nothing beyond the exposed range is
// touched, and the server's other peers go on.
func TestOneSidedAttacker(t *testing.T) {
	forge := map[string]func(d *Desc){
		"forged rkey": func(d *Desc) { d[24] ^= 0x5a; d[25] ^= 0x5a },
		"longer range": func(d *Desc) {
			binary.LittleEndian.PutUint64(d[16:], 1<<20)
			binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(d[8:])+1024)
		},
		"read not given": func(d *Desc) { d[5] = byte(AccessRead | AccessWrite) },
		"other address":  func(d *Desc) { binary.LittleEndian.PutUint64(d[8:], binary.LittleEndian.Uint64(d[8:])+4096) },
		"revoked":        nil,
		"freed":          nil,
	}
	for name, f := range forge {
		t.Run(name, func(t *testing.T) {
			s := newStar(t, rdmaTransport, 2, 4096)
			srv, attacker := s.server, s.clients[0]
			secret := alloc(t, srv, 8192)
			for i := range secret.Bytes() {
				secret.Bytes()[i] = 0xee
			}
			d, err := srv.Expose(0, secret, 0, 1024, AccessWrite)
			require.NoError(t, err)
			switch {
			case name == "freed":
				// Free ends the exposure first, and the memory goes.
				require.NoError(t, secret.Free())
				require.ErrorIs(t, srv.Unexpose(d), ErrBadDesc, "gone with the memory")
			case f == nil:
				require.NoError(t, srv.Unexpose(d))
				require.ErrorIs(t, srv.Unexpose(d), ErrBadDesc, "twice")
			default:
				f(&d)
			}
			local := alloc(t, attacker, 1<<20)
			if name == "read not given" {
				_, err = attacker.Read(0, &d, 0, local, 0, 1024)
			} else {
				_, err = attacker.Write(0, &d, 512, local, 0, 512)
			}
			require.ErrorIs(t, err, ErrRemoteAccess)
			require.ErrorIs(t, err, ErrPeerGone)
			if name != "freed" {
				for i, b := range secret.Bytes()[1024:] {
					if b != 0xee {
						t.Fatalf("byte %d beyond the exposed range changed", 1024+i)
					}
				}
			}
			if name == "read not given" {
				assert.Equal(t, make([]byte, 1024), local.Bytes()[:1024], "nothing was read")
			}
			_, err = attacker.Send(0, []byte("x"))
			require.ErrorIs(t, err, ErrPeerGone)
			_, err = srv.Recv(0, make([]byte, 8))
			require.ErrorIs(t, err, ErrPeerGone)
			// The other client is unaffected.
			_, err = s.clients[1].Send(0, []byte("fine"))
			require.NoError(t, err)
			buf := make([]byte, 8)
			n, err := srv.Recv(1, buf)
			require.NoError(t, err)
			assert.Equal(t, "fine", string(buf[:n]))
		})
	}
}

// One-sided calls need a queue pair: over TCP they say so.
func TestOneSidedNotSupported(t *testing.T) {
	s := newStar(t, tcpTransport, 1, 4096)
	m := alloc(t, s.server, 4096)
	_, err := s.server.Expose(0, m, 0, 64, AccessRead)
	require.ErrorIs(t, err, ErrNotSupported)
}

// Close cancels pending one-sided requests and frees the memory.
func TestOneSidedClose(t *testing.T) {
	s := newStar(t, rdmaTransport, 1, 4096)
	target := alloc(t, s.server, 4096)
	d, err := s.server.Expose(0, target, 0, 4096, AccessRead)
	require.NoError(t, err)
	local := alloc(t, s.clients[0], 4096)
	var reqs []*Request
	for k := 0; k < 50; k++ {
		r, err := s.clients[0].IRead(0, &d, 0, local, 0, 4096)
		require.NoError(t, err)
		reqs = append(reqs, r)
	}
	require.NoError(t, s.clients[0].Close())
	for _, r := range reqs {
		_, _ = r.Wait() // done or cancelled; it completes either way
	}
	_, err = s.clients[0].Alloc(64)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.clients[0].Read(0, &d, 0, local, 0, 64)
	require.Error(t, err)
}

// Messages sent from and received into Alloc'd memory (an rdma.Buffer: a
// large one moves by rdma.Conn's rendezvous, the peer READing it) arrive
// whole, between small ones, into Alloc'd memory and into the Go heap.
func TestSendRecvAllocated(t *testing.T) {
	s := newStar(t, rdmaTransport, 1, 4<<20)
	src := alloc(t, s.clients[0], 3<<20)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*13 + 5)
	}
	dst := alloc(t, s.server, 3<<20)
	heap := make([]byte, 3<<20)
	for _, into := range [][]byte{dst.Bytes(), heap} {
		clear(into)
		errc := make(chan error, 1)
		go func() {
			_, err := s.clients[0].Send(0, []byte("before"))
			if err == nil {
				_, err = s.clients[0].Send(0, src.Bytes())
			}
			if err == nil {
				_, err = s.clients[0].Send(0, []byte("after"))
			}
			errc <- err
		}()
		var small [16]byte
		n, err := s.server.Recv(0, small[:])
		require.NoError(t, err)
		assert.Equal(t, "before", string(small[:n]))
		n, err = s.server.Recv(0, into)
		require.NoError(t, err)
		require.Equal(t, len(src.Bytes()), n)
		assert.True(t, bytes.Equal(src.Bytes(), into[:n]))
		n, err = s.server.Recv(0, small[:])
		require.NoError(t, err)
		assert.Equal(t, "after", string(small[:n]))
		require.NoError(t, <-errc)
	}
	require.NoError(t, src.Free())
	require.NoError(t, dst.Free())
}
