package rdma

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// passed answers from the deadline's state through every move: none, in
// the past, cleared, in the future and then reached, moved again.
func TestDeadlinePassed(t *testing.T) {
	d := makeDeadline()
	defer d.stop()
	assert.False(t, d.passed(), "no deadline")
	d.set(time.Now().Add(-time.Second))
	assert.True(t, d.passed(), "in the past")
	assert.True(t, isClosed(d.wait()))
	d.set(time.Time{})
	assert.False(t, d.passed(), "cleared")
	assert.False(t, isClosed(d.wait()))
	d.set(time.Now().Add(30 * time.Millisecond))
	assert.False(t, d.passed(), "in the future")
	<-d.wait()
	assert.True(t, d.passed(), "reached")
	d.set(time.Now().Add(time.Hour))
	assert.False(t, d.passed(), "moved an hour on")
	d.set(time.Unix(1, 0))
	assert.True(t, d.passed(), "moved into the past")
}
