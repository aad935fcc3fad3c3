// Package phase marks the steps of a connection's setup, so that a
// measuring command (rdmaconns -phases) can tell where the time between a
// dial and the first echo goes. With no recorder set, a mark is one atomic
// load: the marks stay in the library at no cost to anyone not measuring.
// Marks are on the setup path only, never on the data path.
package phase

import "sync/atomic"

// recorder receives every mark while set.
var recorder atomic.Pointer[func(step string)]

// Mark reports that step has just been reached.
func Mark(step string) {
	if f := recorder.Load(); f != nil {
		(*f)(step)
	}
}

// Record sends every mark to f from now on (nil: none). f is called on
// the marking goroutine, so it must be quick and safe for concurrent use.
func Record(f func(step string)) {
	if f == nil {
		recorder.Store(nil)
		return
	}
	recorder.Store(&f)
}
