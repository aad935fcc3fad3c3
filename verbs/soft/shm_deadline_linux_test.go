//go:build linux

package soft

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The shared-memory reader's deadline: passed once its time came, woken
// by its timer then, cleared by the zero time, and silent after stop.
func TestShmReadDeadline(t *testing.T) {
	var woken atomic.Int32
	d := &shmReadDeadline{wake: func() { woken.Add(1) }}
	assert.False(t, d.passed(), "none set")

	d.set(time.Now().Add(-time.Second))
	assert.True(t, d.passed(), "in the past")
	require.Eventually(t, func() bool { return woken.Load() == 1 }, 5*time.Second, time.Millisecond, "a reader asleep is woken")

	d.set(time.Now().Add(time.Hour))
	assert.False(t, d.passed(), "moved into the future")
	d.set(time.Time{})
	assert.False(t, d.passed(), "cleared")

	d.stop()
	d.set(time.Now().Add(time.Millisecond))
	time.Sleep(20 * time.Millisecond)
	assert.True(t, d.passed(), "the time still counts after stop")
	assert.Equal(t, int32(1), woken.Load(), "no timer after stop")
}
