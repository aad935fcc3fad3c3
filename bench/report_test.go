package main

import (
	"io"
	"testing"
	"time"
)

// A paced workload's throughput is its pace on either transport: its
// ratio is TCP's p50 over rdma's, and says so; others stay by throughput.
func TestRatioOfPacedWorkloadIsByLatency(t *testing.T) {
	for _, paced := range []bool{false, true} {
		r := &report{}
		o := options{quiet: true}
		tcp := sample{ops: 200, elapsed: time.Second, cpu: cpuTime{User: time.Millisecond}, p50: 100 * time.Microsecond, p99: time.Millisecond, paced: paced}
		rdma := sample{ops: 196, elapsed: time.Second, cpu: cpuTime{User: time.Millisecond}, p50: 40 * time.Microsecond, p99: time.Millisecond, paced: paced}
		r.add(io.Discard, o, 1, "shm", "tcp", "w", tcp)
		r.add(io.Discard, o, 1, "shm", "rdma", "w", rdma)
		r.summarize()
		var got Result
		for _, x := range r.Summary {
			if x.Transport == "rdma" {
				got = x
			}
		}
		want, wantBy := 0.98, ""
		if paced {
			want, wantBy = 2.5, "p50"
		}
		if d := got.Ratio - want; d > 1e-9 || d < -1e-9 || got.RatioBy != wantBy {
			t.Errorf("paced %v: ratio %.4f by %q, want %.4f by %q", paced, got.Ratio, got.RatioBy, want, wantBy)
		}
	}
}

// The kernel's part of TCP's CPU bounds what a transport can gain for a
// CPU-bound workload: 4 us an op of which 1 us in the kernel gives 4/3.
func TestCeilingIsTCPsCPUOverItsUserPart(t *testing.T) {
	r := &report{}
	o := options{quiet: true}
	tcp := sample{ops: 1000, elapsed: time.Second, cpu: cpuTime{User: 3 * time.Millisecond, Sys: time.Millisecond}}
	rdma := sample{ops: 1200, elapsed: time.Second, cpu: cpuTime{User: 3 * time.Millisecond}}
	r.add(io.Discard, o, 1, "shm", "tcp", "w", tcp)
	r.add(io.Discard, o, 1, "shm", "rdma", "w", rdma)
	r.summarize()
	for _, x := range r.Summary {
		switch x.Transport {
		case "tcp":
			if x.SysPerOp != 1 || x.CPUPerOp != 4 {
				t.Errorf("TCP: sys %.3f us/op, CPU %.3f us/op, want 1 and 4", x.SysPerOp, x.CPUPerOp)
			}
		case "rdma":
			if d := x.Ceiling - 4.0/3; d > 1e-9 || d < -1e-9 {
				t.Errorf("ceiling %.4f, want 1.3333", x.Ceiling)
			}
		}
	}
}
