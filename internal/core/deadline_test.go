package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// passed answers from the deadline's state through every move: none, in
// the past, cleared, in the future and then reached, moved again.
func TestDeadlinePassed(t *testing.T) {
	d := MakeDeadline()
	defer d.Stop()
	assert.False(t, d.Passed(), "no deadline")
	d.Set(time.Now().Add(-time.Second))
	assert.True(t, d.Passed(), "in the past")
	assert.True(t, IsClosed(d.Wait()))
	d.Set(time.Time{})
	assert.False(t, d.Passed(), "cleared")
	assert.False(t, IsClosed(d.Wait()))
	d.Set(time.Now().Add(30 * time.Millisecond))
	assert.False(t, d.Passed(), "in the future")
	<-d.Wait()
	assert.True(t, d.Passed(), "reached")
	d.Set(time.Now().Add(time.Hour))
	assert.False(t, d.Passed(), "moved an hour on")
	d.Set(time.Unix(1, 0))
	assert.True(t, d.Passed(), "moved into the past")
}
