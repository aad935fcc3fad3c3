package main

import (
	"fmt"
	"io"
	"runtime/metrics"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rdmanet/rdma/internal/phase"
)

// phaseStep is one setup step's time, mean over the connections that
// reached it, from the dial's start.
type phaseStep struct {
	Step  string  `json:"step"`
	AtUS  float64 `json:"at_us"` // mean time from the dial's start
	Conns int     `json:"conns"` // connections that reached it
}

// phaseClock collects the library's setup marks (internal/phase) of one
// connection at a time, and sums them over the connections.
type phaseClock struct {
	mu    sync.Mutex
	t0    time.Time
	seen  map[string]bool // this connection's steps so far
	sum   map[string]time.Duration
	count map[string]int

	faults0  int64  // minor page faults of the process when the setups began
	started0 uint64 // goroutines the process had started then
}

// minorFaults is the process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Minflt
}

// goroutinesStarted is how many goroutines the process has started so far.
func goroutinesStarted() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func newPhaseClock() *phaseClock {
	return &phaseClock{seen: map[string]bool{}, sum: map[string]time.Duration{}, count: map[string]int{}}
}

// start records from now on, every mark timed from the last begin.
func (p *phaseClock) start() { phase.Record(p.mark) }

// stop ends the recording.
func (p *phaseClock) stop() { phase.Record(nil) }

// begin starts a connection's clock.
func (p *phaseClock) begin() {
	p.mu.Lock()
	p.t0 = time.Now()
	clear(p.seen)
	p.mu.Unlock()
}

// mark takes the first time of a step in the current connection.
func (p *phaseClock) mark(step string) {
	now := time.Now()
	p.mu.Lock()
	if !p.t0.IsZero() && !p.seen[step] {
		p.seen[step] = true
		p.sum[step] += now.Sub(p.t0)
		p.count[step]++
	}
	p.mu.Unlock()
}

// steps returns the mean time of every step, in order of it.
func (p *phaseClock) steps() []phaseStep {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []phaseStep
	for s, d := range p.sum {
		n := p.count[s]
		out = append(out, phaseStep{Step: s, AtUS: float64(d) / float64(n) / 1e3, Conns: n})
	}
	slices.SortFunc(out, func(a, b phaseStep) int {
		if a.AtUS < b.AtUS {
			return -1
		}
		if a.AtUS > b.AtUS {
			return 1
		}
		return 0
	})
	return out
}

// reportPhases prints each path's steps: the mean time from the dial's
// start, and from the step before.
func reportPhases(w io.Writer, rs []result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range rs {
		if len(r.Phases) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\n%s (%.1f page faults, %.1f goroutines started a connection): step\tat\tsince previous\tconns\t\n", r.Path, r.FaultsPerConn, r.GoroutinesPerConn)
		prev := 0.0
		for _, s := range r.Phases {
			fmt.Fprintf(tw, "%s\t%.0f us\t%.0f us\t%d\t\n", s.Step, s.AtUS, s.AtUS-prev, s.Conns)
			prev = s.AtUS
		}
	}
	return tw.Flush()
}
