package soft

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The busy phase: on while it catches; off after busySpinMisses failures
// in a row, then tried once every busySpinProbe waits; a catch turns it
// back on; never longer than the spin.
func TestBusySpin(t *testing.T) {
	var b busySpin
	busy := int64(busySpinTime)
	spin := int64(50_000)
	for range 10 {
		assert.Equal(t, busy, b.budget(spin))
		b.caught(true)
	}
	assert.Equal(t, int64(1000), b.budget(1000), "bounded by the spin")
	b.caught(true)
	for i := range busySpinMisses - 1 {
		assert.Equal(t, busy, b.budget(spin), "miss %d", i)
		b.caught(false)
	}
	assert.Equal(t, busy, b.budget(spin))
	b.caught(false) // the busySpinMisses-th: off
	// Off: the next probe is busySpinProbe waits on, and so on while
	// probes fail.
	for range 3 {
		off := 0
		for b.budget(spin) == 0 {
			off++
		}
		assert.Equal(t, busySpinProbe-1, off)
		b.caught(false)
	}
	// A probe that catches turns it back on.
	for b.budget(spin) == 0 {
	}
	b.caught(true)
	for range 5 {
		assert.Equal(t, busy, b.budget(spin))
		b.caught(true)
	}
	// ... and it takes busySpinMisses failures in a row again to turn it off.
	for range busySpinMisses - 1 {
		assert.Equal(t, busy, b.budget(spin))
		b.caught(false)
	}
	assert.Equal(t, busy, b.budget(spin))
}
