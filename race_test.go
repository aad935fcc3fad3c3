//go:build race

package rdma

// raceEnabled: the race detector is on (tests that hold thousands of
// connections hold fewer: it multiplies their CPU time and memory).
const raceEnabled = true
