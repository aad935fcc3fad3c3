package streamconn

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// newTestBuffer is a Buffer of size bytes, with no connection: its state
// is all that is tested here.
func newTestBuffer(t *testing.T, size int) *Buffer {
	t.Helper()
	mem, err := verbs.AllocMemory(size)
	require.NoError(t, err)
	b := new(Buffer)
	b.Init(mem, size)
	t.Cleanup(func() { _ = b.Free() })
	return b
}

// A Buffer's life as its state sees it, without a provider: found from a
// slice of it, refused to Pool and Free while a transfer uses it,
// unusable while pooled, usable again once taken out of the pool, and
// gone for bufferOf and further uses once freed.
func TestBufferStates(t *testing.T) {
	b := newTestBuffer(t, 4096)
	p := b.Bytes()[100:200]
	assert.Same(t, b, bufferOf(p), "a slice of it is traced to it")
	assert.Nil(t, bufferOf(make([]byte, 10)), "a Go slice lies in no Buffer")

	require.NoError(t, b.Acquire())
	assert.ErrorIs(t, b.Pool(), ErrBufferBusy, "a Buffer in use is not pooled")
	assert.ErrorIs(t, b.Free(), ErrBufferBusy, "nor freed")
	assert.False(t, b.Freed())
	b.Release()

	require.NoError(t, b.Pool())
	assert.ErrorIs(t, b.Acquire(), errBufferPooled, "a pooled Buffer takes no transfer")
	assert.ErrorIs(t, b.Pool(), errBufferPooled, "nor a second Pool")
	assert.ErrorIs(t, b.Free(), errBufferPooled, "the pool's, not the caller's to free")
	b.Unpool()
	require.NoError(t, b.Acquire(), "out of the pool it is usable again")
	b.Release()

	require.NoError(t, b.Free())
	assert.True(t, b.Freed())
	assert.Nil(t, bufferOf(b.buf), "a freed Buffer is found no more")
	assert.ErrorIs(t, b.Acquire(), errBufferFreed)
	assert.ErrorIs(t, b.Pool(), errBufferFreed)
	assert.NoError(t, b.Free(), "Free twice is a no-op")
	assert.Zero(t, b.Holders())
}

// The error of a one-sided operation's slice outside any Buffer matches
// EINVAL and says so.
func TestNotInBufferError(t *testing.T) {
	assert.ErrorIs(t, errNotInBuffer, syscall.EINVAL)
	assert.Contains(t, errNotInBuffer.Error(), "does not lie in a Buffer")
}
