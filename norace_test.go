//go:build !race

package rdma

// raceEnabled: the race detector is on (see race_test.go).
const raceEnabled = false
