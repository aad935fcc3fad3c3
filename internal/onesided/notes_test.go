package onesided

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The notification ring is made on the first notification and grows to
// RecvDepth as notifications are held, keeping them in order; one more
// than RecvDepth is refused.
func TestNotificationRingGrows(t *testing.T) {
	const recvWRs = 20
	var q NoteQueue
	assert.Nil(t, q.ring, "no ring before the first notification")
	for i := range recvWRs + 2 {
		require.True(t, q.Push(Note{Value: uint32(i)}, recvWRs), "room for notification %d", i)
		if i == 0 {
			assert.Len(t, q.ring, notesStartSlots)
		}
		if i == 2 {
			// Two taken: the ring wraps before it grows.
			for want := range uint32(2) {
				nt, ok := q.Pop()
				require.True(t, ok)
				assert.Equal(t, want, nt.Value)
			}
		}
	}
	assert.Len(t, q.ring, recvWRs, "grown to RecvDepth, no further")
	assert.Equal(t, recvWRs, q.Len())
	assert.False(t, q.Push(Note{Value: 99}, recvWRs), "RecvDepth notifications held: no more")
	assert.Equal(t, recvWRs, q.Len(), "a refused one is not held")
	for i := range recvWRs {
		nt, ok := q.Pop()
		require.True(t, ok)
		assert.Equal(t, uint32(i+2), nt.Value, "in arrival order")
	}
	_, ok := q.Pop()
	assert.False(t, ok, "none left")
	require.True(t, q.Idle())
	q.Trim()
	assert.Nil(t, q.ring, "an empty ring is given back")
	assert.False(t, q.Idle())
}

// A ring that holds notifications is kept by trim.
func TestNotificationRingTrimKeepsHeld(t *testing.T) {
	var q NoteQueue
	require.True(t, q.Push(Note{Value: 7, N: 3}, 4))
	assert.False(t, q.Idle())
	q.Trim()
	nt, ok := q.Pop()
	require.True(t, ok)
	assert.Equal(t, Note{Value: 7, N: 3}, nt)
}
