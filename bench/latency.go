package main

import (
	"slices"
	"sync"
	"time"
)

// latencies gathers the durations of a workload's operations from its
// workers; each worker records into its own slice, merged at the end.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

// add merges one worker's durations.
func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

// quantiles returns the p50 and p99 of what was recorded.
func (l *latencies) quantiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return quantiles(l.all)
}

func quantiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.50), at(0.99)
}
