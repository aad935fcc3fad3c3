//go:build cgo && linux && !race

package rdmacore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A wait allocates nothing (the race detector's instrumentation does, so
// not under -race).
func TestDirectWaitAllocs(t *testing.T) {
	d, ev, try := directPair(t)
	defer d.close()
	allocs := testing.AllocsPerRun(100, func() {
		signalFD(ev)
		if done, err := d.wait(try); !done || err != nil {
			t.Fatal(done, err)
		}
	})
	assert.Zero(t, allocs)
}
