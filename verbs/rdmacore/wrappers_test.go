//go:build cgo && linux

package rdmacore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A wrapper is found by its C pointer until removed; getOrAdd makes one
// only where there is none; add replaces.
func TestWrappers(t *testing.T) {
	var ws wrappers[uintptr, int]
	assert.Nil(t, ws.get(1))
	one, two := 1, 2
	made := 0
	wrap := func() *int { made++; return &one }
	assert.Same(t, &one, ws.getOrAdd(1, wrap))
	assert.Same(t, &one, ws.getOrAdd(1, wrap))
	assert.Equal(t, 1, made)
	ws.add(1, &two)
	assert.Same(t, &two, ws.get(1))
	ws.add(2, &one)
	ws.remove(1)
	assert.Nil(t, ws.get(1))
	assert.Same(t, &one, ws.get(2))
}
