package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A send buffer hands out bytes in order, never across its end, and takes
// them back only as their WRs complete.
func TestSendBufferReservesInOrderWithoutWrapping(t *testing.T) {
	mem := make([]byte, 8192)
	s := newSendBuffer(mem)
	start := sendStart(len(mem))
	free, contig := s.room()
	assert.Equal(t, uint64(8192), free)
	assert.Equal(t, 8192-start, contig, "room in a row ends at the buffer's end")

	a := s.reserve(contig - 100)
	assert.Equal(t, &mem[start], &a[0], "the first bytes are at the start position")
	s.post(uint64(len(a)))
	free, contig = s.room()
	assert.Equal(t, uint64(100), contig)
	assert.Equal(t, 8192-uint64(len(a)), free)

	// 200 bytes do not fit in the 100 before the end: pad, then start over.
	s.pad(contig)
	free, contig = s.room()
	assert.Equal(t, 8192-(8192-start), free, "the pad is in flight too, until the WR before it completes")
	assert.Equal(t, uint64(8192), contig, "after the pad the buffer's whole length lies ahead")
	b := s.reserve(200)
	assert.Equal(t, &mem[0], &b[0], "after a pad the next bytes start at the buffer's start")
	s.post(200)
	assert.Equal(t, uint64(len(a))+100+200, s.inFlight())

	// Nothing comes back until a WR completes; then all before its end.
	s.retire(s.posted - 200)
	assert.Equal(t, uint64(200), s.inFlight())
	free, _ = s.room()
	assert.Equal(t, uint64(8192-200), free)
}

func TestSendBufferHalfFullAndNext(t *testing.T) {
	mem := make([]byte, 4096)
	s := newSendBuffer(mem)
	_, contig := s.room()
	n := s.next(10)
	r := s.reserve(10)
	assert.Equal(t, &n[0], &r[0], "next is where reserve puts the bytes")
	s.post(10)
	assert.False(t, s.halfFull())
	s.pad(contig - 10)
	s.reserve(2048 - contig)
	s.post(2048 - contig)
	assert.True(t, s.halfFull(), "half the buffer waits for completions")
	s.retire(s.posted)
	assert.False(t, s.halfFull())
	assert.Zero(t, s.inFlight())
}

// A buffer that grows goes on from the current position in the new one;
// bytes in flight in the old one still count against nothing new.
func TestSendBufferMovesToALargerBuffer(t *testing.T) {
	small, large := make([]byte, 4096), make([]byte, 16384)
	s := newSendBuffer(small)
	s.reserve(100)
	s.post(100)
	s.moveTo(large)
	free, contig := s.room()
	assert.Equal(t, uint64(16384), free, "the old buffer's bytes in flight are not in the new one")
	assert.Equal(t, uint64(16384), contig, "the new buffer starts at its start")
	b := s.reserve(500)
	require.Len(t, b, 500)
	assert.Equal(t, &large[0], &b[0])
	assert.Equal(t, uint64(600), s.inFlight())
}
