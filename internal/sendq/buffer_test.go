package sendq

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A send buffer hands out bytes in order, never across its end, and takes
// them back only as their WRs complete.
func TestSendBufferReservesInOrderWithoutWrapping(t *testing.T) {
	mem := make([]byte, 8192)
	s := NewBuffer(mem)
	start := Start(len(mem))
	free, contig := s.Room()
	assert.Equal(t, uint64(8192), free)
	assert.Equal(t, 8192-start, contig, "room in a row ends at the buffer's end")

	a := s.Reserve(contig - 100)
	assert.Equal(t, &mem[start], &a[0], "the first bytes are at the start position")
	s.Post(uint64(len(a)))
	free, contig = s.Room()
	assert.Equal(t, uint64(100), contig)
	assert.Equal(t, 8192-uint64(len(a)), free)

	// 200 bytes do not fit in the 100 before the end: pad, then start over.
	s.Pad(contig)
	free, contig = s.Room()
	assert.Equal(t, 8192-(8192-start), free, "the pad is in flight too, until the WR before it completes")
	assert.Equal(t, uint64(8192), contig, "after the pad the buffer's whole length lies ahead")
	b := s.Reserve(200)
	assert.Equal(t, &mem[0], &b[0], "after a pad the next bytes start at the buffer's start")
	s.Post(200)
	assert.Equal(t, uint64(len(a))+100+200, s.InFlight())

	// Nothing comes back until a WR completes; then all before its end.
	s.Retire(s.Posted - 200)
	assert.Equal(t, uint64(200), s.InFlight())
	free, _ = s.Room()
	assert.Equal(t, uint64(8192-200), free)
}

// Next is where the next Reserve puts its bytes. The signal span is a
// quarter of the buffer while more than half of it is in flight, and no
// limit while less is; it follows the buffer when it grows.
func TestSendBufferNextAndSignalSpan(t *testing.T) {
	mem := make([]byte, 4096)
	s := NewBuffer(mem)
	n := s.Next(10)
	r := s.Reserve(10)
	assert.Equal(t, &n[0], &r[0], "next is where reserve puts the bytes")
	s.Post(10)
	assert.Equal(t, uint64(NoSpan), s.SignalSpan(), "little in flight: no byte limit")
	_, contig := s.Room()
	s.Pad(contig)
	s.Reserve(2048 - contig - 10)
	s.Post(2048 - contig - 10)
	assert.Equal(t, uint64(2048), s.InFlight())
	assert.Equal(t, uint64(1024), s.SignalSpan(), "half in flight: a quarter")
	s.Retire(s.Posted - 1)
	assert.Equal(t, uint64(NoSpan), s.SignalSpan())
	big := make([]byte, 16384)
	s.MoveTo(big)
	s.Reserve(9000)
	s.Post(9000)
	assert.Equal(t, uint64(4096), s.SignalSpan(), "a quarter of the larger buffer")
}

// A buffer that grows goes on from the current position in the new one;
// bytes in flight in the old one still count against nothing new.
func TestSendBufferMovesToALargerBuffer(t *testing.T) {
	small, large := make([]byte, 4096), make([]byte, 16384)
	s := NewBuffer(small)
	s.Reserve(100)
	s.Post(100)
	s.MoveTo(large)
	free, contig := s.Room()
	assert.Equal(t, uint64(16384), free, "the old buffer's bytes in flight are not in the new one")
	assert.Equal(t, uint64(16384), contig, "the new buffer starts at its start")
	b := s.Reserve(500)
	require.Len(t, b, 500)
	assert.Equal(t, &large[0], &b[0])
	assert.Equal(t, uint64(600), s.InFlight())
}
