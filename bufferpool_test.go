package rdma

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pool hands back what was put (same memory, no new mapping), keeps at
// most keep between uses and frees the rest, refuses a Buffer of another
// size, a busy one and a freed one, and Close frees what it kept.
func TestBufferPool(t *testing.T) {
	_, err := NewBufferPool(0, 1)
	require.Error(t, err)
	_, err = NewBufferPool(4096, -1)
	require.Error(t, err)

	p, err := NewBufferPool(64<<10, 2)
	require.NoError(t, err)
	assert.Equal(t, 64<<10, p.Size())
	a, err := p.Get()
	require.NoError(t, err)
	b, err := p.Get()
	require.NoError(t, err)
	c, err := p.Get()
	require.NoError(t, err)
	require.Len(t, a.Bytes(), 64<<10)
	assert.NotSame(t, a, b)
	a.Bytes()[0] = 7
	require.NoError(t, p.Put(a))
	require.NoError(t, p.Put(b))
	require.NoError(t, p.Put(c)) // beyond keep: freed
	assert.True(t, c.b.Freed(), "the third is freed, not kept")
	got, err := p.Get()
	require.NoError(t, err)
	assert.Same(t, b, got, "last put, first out")
	got2, err := p.Get()
	require.NoError(t, err)
	assert.Same(t, a, got2)
	assert.Equal(t, byte(7), got2.Bytes()[0], "its bytes as left")

	other := allocBuffer(t, 4096)
	assert.Error(t, p.Put(other), "another size")
	assert.Error(t, p.Put(nil))
	require.NoError(t, got.b.Acquire())
	assert.ErrorIs(t, p.Put(got), ErrBufferBusy)
	got.b.Release()
	require.NoError(t, got.Free())
	assert.Error(t, p.Put(got), "a freed buffer")

	require.NoError(t, p.Put(got2))
	allocs := testing.AllocsPerRun(100, func() {
		b, _ := p.Get()
		_ = p.Put(b)
	})
	assert.Zero(t, allocs, "a Get and Put of a kept Buffer allocate nothing")
	require.NoError(t, p.Close())
	assert.True(t, got2.b.Freed(), "Close frees what the pool kept")
	_, err = p.Get()
	assert.Error(t, err)
	d := allocBuffer(t, 64<<10)
	require.NoError(t, p.Put(d), "after Close, Put frees")
	assert.True(t, d.b.Freed())
}

// Buffers from a pool carry a connection's Writes (the rendezvous, at this
// size) and Reads, a writer getting and putting one a message while a
// reader holds its own.
func TestBufferPoolOnConn(t *testing.T) {
	c, s := pair(t, lowRndv(t))
	p, err := NewBufferPool(64<<10, 4)
	require.NoError(t, err)
	defer p.Close()
	const n = 40
	errc := make(chan error, 1)
	go func() {
		rb, err := p.Get()
		if err != nil {
			errc <- err
			return
		}
		defer p.Put(rb)
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(s, rb.Bytes()); err != nil {
				errc <- err
				return
			}
			if rb.Bytes()[0] != byte(i) || rb.Bytes()[len(rb.Bytes())-1] != byte(i) {
				errc <- io.ErrUnexpectedEOF
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < n; i++ {
		b, err := p.Get()
		require.NoError(t, err)
		fill(b.Bytes(), byte(i))
		_, err = c.Write(b.Bytes())
		require.NoError(t, err)
		require.NoError(t, p.Put(b))
	}
	require.NoError(t, <-errc)
}
