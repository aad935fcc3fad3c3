package rdma

import (
	"bytes"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/verbs"
)

// region is registrable memory for one-sided tests, freed at cleanup.
func region(t *testing.T, size int) []byte {
	t.Helper()
	m, err := verbs.AllocMemory(size)
	require.NoError(t, err)
	t.Cleanup(func() { m.Free() })
	return m.Bytes()[:size]
}

func ports(t *testing.T) (c, s *Conn, cp, sp onesided.Port) {
	c, s = pair(t, nil)
	cp, sp = onesided.PortOf(c), onesided.PortOf(s)
	require.NotNil(t, cp)
	require.NotNil(t, sp)
	return c, s, cp, sp
}

// RDMA WRITE and READ land byte for byte, a notification follows its write,
// and the byte stream goes on beside them.
func TestOneSidedWriteRead(t *testing.T) {
	c, s, cp, sp := ports(t)
	target := region(t, 1<<16)
	tmr, err := sp.Register(target, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	local := region(t, 1<<16)
	lmr, err := cp.Register(local, verbs.AccessLocalWrite)
	require.NoError(t, err)

	for i := range local {
		local[i] = byte(i * 7)
	}
	require.NoError(t, cp.Write(lmr, local[100:5100], tmr.Addr()+1000, tmr.RKey(), false, 0))
	assert.True(t, bytes.Equal(local[100:5100], target[1000:6000]))

	require.NoError(t, cp.Write(lmr, local[:64], tmr.Addr(), tmr.RKey(), true, onesided.NotifyValueMax))
	v, n, err := sp.WaitNotify(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	assert.Equal(t, uint32(onesided.NotifyValueMax), v)
	assert.Equal(t, 64, n)
	assert.Equal(t, local[:64], target[:64])

	for i := range target {
		target[i] = byte(i * 3)
	}
	clear(local)
	require.NoError(t, cp.Read(lmr, local[:30000], tmr.Addr()+7, tmr.RKey()))
	assert.True(t, bytes.Equal(target[7:30007], local[:30000]))

	// The stream is intact.
	go c.Write([]byte("still a stream"))
	buf := make([]byte, 14)
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
	assert.Equal(t, "still a stream", string(buf))
}

// More notifications than the receive depth, from several goroutines while
// the stream flows, all arrive: each holds its credit only until taken.
func TestOneSidedNotifyBeyondDepth(t *testing.T) {
	c, s, cp, sp := ports(t)
	target := region(t, 4096)
	tmr, err := sp.Register(target, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	local := region(t, 4096)
	lmr, err := cp.Register(local, verbs.AccessLocalWrite)
	require.NoError(t, err)

	const writers, each = 4, 200 // 800 > the default receive depth of 128
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := cp.Write(lmr, local[w*8:w*8+8], tmr.Addr()+uint64(w*8), tmr.RKey(), true, uint32(w<<16|i)); err != nil {
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
	for k := 0; k < writers*each; k++ {
		v, n, err := sp.WaitNotify(time.Now().Add(10 * time.Second))
		require.NoError(t, err)
		require.Equal(t, 8, n)
		w, i := int(v>>16), int(v&0xffff)
		require.Equal(t, next[w], i, "a writer's notifications arrive in order")
		next[w]++
	}
	wg.Wait()
	_, err = io.ReadFull(s, make([]byte, 100*1000))
	require.NoError(t, err)
	_, _, err = sp.WaitNotify(time.Now().Add(10 * time.Millisecond))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// The target's device refuses what a registration does not grant, and
// the refusal breaks the connection on both sides, as on hardware.
func TestOneSidedRefused(t *testing.T) {
	cases := map[string]func(mr verbs.MR) (addr uint64, rkey uint32, read bool){
		"forged rkey":    func(mr verbs.MR) (uint64, uint32, bool) { return mr.Addr(), mr.RKey() ^ 0x5a5a00, false },
		"out of bounds":  func(mr verbs.MR) (uint64, uint32, bool) { return mr.Addr() + uint64(mr.Len()) - 8, mr.RKey(), false },
		"read not given": func(mr verbs.MR) (uint64, uint32, bool) { return mr.Addr(), mr.RKey(), true },
	}
	for name, forge := range cases {
		t.Run(name, func(t *testing.T) {
			c, s, cp, sp := ports(t)
			target := region(t, 4096)
			tmr, err := sp.Register(target[:1024], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			require.NoError(t, err)
			local := region(t, 4096)
			lmr, err := cp.Register(local, verbs.AccessLocalWrite)
			require.NoError(t, err)
			addr, rkey, read := forge(tmr)
			if read {
				err = cp.Read(lmr, local[:64], addr, rkey)
			} else {
				err = cp.Write(lmr, local[:64], addr, rkey, false, 0)
			}
			require.ErrorIs(t, err, onesided.ErrRemoteAccess)
			assert.Equal(t, make([]byte, 4096-1024), target[1024:], "nothing beyond the registration was touched")
			_, err = c.Write([]byte("x"))
			assert.Error(t, err, "the requester's connection is broken")
			_, err = s.Read(make([]byte, 1))
			assert.Error(t, err, "the target's connection is broken")
		})
	}
}

// A deregistered region refuses later accesses.
func TestOneSidedRevoked(t *testing.T) {
	_, _, cp, sp := ports(t)
	target := region(t, 4096)
	tmr, err := sp.Register(target, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	local := region(t, 4096)
	lmr, err := cp.Register(local, verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, cp.Write(lmr, local[:8], tmr.Addr(), tmr.RKey(), false, 0))
	require.NoError(t, sp.Deregister(tmr))
	require.NoError(t, sp.Deregister(tmr), "twice is a no-op")
	err = cp.Write(lmr, local[:8], tmr.Addr(), tmr.RKey(), false, 0)
	require.ErrorIs(t, err, onesided.ErrRemoteAccess)
}

// Registrations left at Close are released with the connection, and
// operations on a closed connection fail cleanly.
func TestOneSidedAfterClose(t *testing.T) {
	c, _, cp, _ := ports(t)
	local := region(t, 4096)
	lmr, err := cp.Register(local, verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, cp.Deregister(lmr))
	_, err = cp.Register(local, verbs.AccessLocalWrite)
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, cp.Write(lmr, local[:8], 0, 0, false, 0), net.ErrClosed)
	_, _, err = cp.WaitNotify(time.Time{})
	require.ErrorIs(t, err, net.ErrClosed)
}

// A one-sided write allocates nothing.
func TestOneSidedZeroAllocs(t *testing.T) {
	_, _, cp, sp := ports(t)
	target := region(t, 4096)
	tmr, err := sp.Register(target, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	local := region(t, 4096)
	lmr, err := cp.Register(local, verbs.AccessLocalWrite)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(200, func() {
		if err := cp.Write(lmr, local[:64], tmr.Addr(), tmr.RKey(), false, 0); err != nil {
			panic(err)
		}
		if err := cp.Read(lmr, local[:64], tmr.Addr(), tmr.RKey()); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}
