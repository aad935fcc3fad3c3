package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one row of the report, the same schema for every workload:
// one measurement (Round >= 1), or the medians over the rounds (Round 0,
// in Summary; Ratio then is the median of the rounds' ratios).
type Result struct {
	Workload  string  `json:"workload"`
	Path      string  `json:"path"`      // shm, tcp or rdmacore: the rdma side's
	Transport string  `json:"transport"` // rdma or tcp (Go's, over loopback or the guest's netdev)
	Round     int     `json:"round"`
	Ops       int64   `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	CPUPerOp  float64 `json:"cpu_per_op_us"` // both processes' user+sys (raft: all three)
	SysPerOp  float64 `json:"sys_per_op_us"` // the kernel's part of CPUPerOp
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	// Ratio is rdma's ops/s over TCP's in the same round (rdma rows),
	// or, for a paced workload (RatioBy "p50"), whose throughput is its
	// pace on either transport, TCP's p50 latency over rdma's: either way
	// above 1 is rdma faster. CPURatio is rdma's CPU per op over TCP's.
	Ratio    float64 `json:"ratio_rdma_tcp,omitempty"`
	RatioBy  string  `json:"ratio_by,omitempty"` // "p50" for a paced workload; empty: throughput
	CPURatio float64 `json:"cpu_ratio_rdma_tcp,omitempty"`
	// Ceiling is TCP's CPU per op over its user-mode part: the ratio a
	// CPU-bound workload would reach if rdma's transport took no CPU at all
	// and the kernel's time were all TCP's (rdma rows).
	Ceiling float64 `json:"cpu_bound_ceiling,omitempty"`
	// RDMAPaths: the paths the client's rdma connections were on at the end.
	RDMAPaths string `json:"rdma_paths,omitempty"`
}

type report struct {
	Started  time.Time `json:"started"`
	Go       string    `json:"go"`
	CPUs     int       `json:"cpus"`
	Args     []string  `json:"args"`
	Duration string    `json:"duration_per_measurement"`
	Rounds   []Result  `json:"rounds"`
	Summary  []Result  `json:"summary"`
}

func newReport(o options) *report {
	return &report{Started: time.Now().UTC(), Go: runtime.Version(), CPUs: runtime.NumCPU(), Args: os.Args[1:], Duration: o.sc.dur.String()}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// add records a sample, with its ratio to TCP's if the round's other
// transport is in.
func (r *report) add(out io.Writer, o options, round int, path, tn, workload string, s sample) {
	res := Result{Workload: workload, Path: path, Transport: tn, Round: round, Ops: s.ops,
		Seconds: s.elapsed.Seconds(), P50: us(s.p50), P99: us(s.p99), RDMAPaths: s.paths}
	if s.elapsed > 0 {
		res.OpsPerSec = float64(s.ops) / s.elapsed.Seconds()
	}
	if s.ops > 0 {
		res.CPUPerOp = us(s.cpu.total()) / float64(s.ops)
		res.SysPerOp = us(s.cpu.Sys) / float64(s.ops)
	}
	r.Rounds = append(r.Rounds, res)
	var rdma, tcp *Result
	for i := range r.Rounds {
		x := &r.Rounds[i]
		if x.Workload == workload && x.Path == path && x.Round == round {
			if x.Transport == "rdma" {
				rdma = x
			} else {
				tcp = x
			}
		}
	}
	if s.paced && rdma != nil {
		rdma.RatioBy = "p50"
	}
	if rdma != nil && tcp != nil && tcp.OpsPerSec > 0 {
		rdma.Ratio = rdma.OpsPerSec / tcp.OpsPerSec
		if rdma.RatioBy == "p50" && rdma.P50 > 0 {
			rdma.Ratio = tcp.P50 / rdma.P50
		}
		if tcp.CPUPerOp > 0 {
			rdma.CPURatio = rdma.CPUPerOp / tcp.CPUPerOp
		}
		if user := tcp.CPUPerOp - tcp.SysPerOp; user > 0 {
			rdma.Ceiling = tcp.CPUPerOp / user
		}
	}
	if !o.quiet {
		line := fmt.Sprintf("round %d %-8s %-18s %-4s %10.0f ops/s %8.1f us CPU/op p50 %8.1f us p99 %9.1f us",
			round, path, workload, tn, res.OpsPerSec, res.CPUPerOp, res.P50, res.P99)
		if rdma != nil && tcp != nil {
			line += fmt.Sprintf("  rdma/tcp %.2fx", rdma.Ratio)
			if rdma.RatioBy != "" {
				line += " by " + rdma.RatioBy
			}
		}
		if s.paths != "" {
			line += "  [" + s.paths + "]"
		}
		fmt.Fprintln(out, line)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summarize fills Summary: per workload, path and transport the medians.
func (r *report) summarize() {
	r.Summary = nil
	type key struct{ w, p, t string }
	var keys []key
	groups := map[key][]Result{}
	for _, x := range r.Rounds {
		k := key{x.Workload, x.Path, x.Transport}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], x)
	}
	for _, k := range keys {
		g := groups[k]
		col := func(f func(Result) float64) float64 {
			var v []float64
			for _, x := range g {
				if y := f(x); y != 0 || f(Result{}) != 0 {
					v = append(v, y)
				}
			}
			return median(v)
		}
		res := Result{Workload: k.w, Path: k.p, Transport: k.t,
			Ops:       int64(col(func(x Result) float64 { return float64(x.Ops) })),
			Seconds:   col(func(x Result) float64 { return x.Seconds }),
			OpsPerSec: col(func(x Result) float64 { return x.OpsPerSec }),
			CPUPerOp:  col(func(x Result) float64 { return x.CPUPerOp }),
			SysPerOp:  col(func(x Result) float64 { return x.SysPerOp }),
			P50:       col(func(x Result) float64 { return x.P50 }),
			P99:       col(func(x Result) float64 { return x.P99 }),
			Ratio:     col(func(x Result) float64 { return x.Ratio }),
			RatioBy:   g[len(g)-1].RatioBy,
			CPURatio:  col(func(x Result) float64 { return x.CPURatio }),
			Ceiling:   col(func(x Result) float64 { return x.Ceiling }),
			RDMAPaths: g[len(g)-1].RDMAPaths,
		}
		r.Summary = append(r.Summary, res)
	}
}

// write prints the table and writes the JSON report and the plot if asked.
func (r *report) write(o options, out io.Writer) error {
	r.table(out)
	if o.jsonFile != "" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if o.svgFile != "" {
		if err := os.WriteFile(o.svgFile, []byte(r.svg()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pairs are the summary's rdma rows, each with its TCP row.
func (r *report) pairs() [][2]Result {
	var out [][2]Result
	for _, x := range r.Summary {
		if x.Transport != "rdma" {
			continue
		}
		for _, y := range r.Summary {
			if y.Transport == "tcp" && y.Workload == x.Workload && y.Path == x.Path {
				out = append(out, [2]Result{x, y})
			}
		}
	}
	return out
}

// table prints the medians, rdma beside TCP.
func (r *report) table(out io.Writer) {
	fmt.Fprintf(out, "\nmedians of the rounds (%s per measurement); ratio: median of the rounds' rdma/TCP throughput (paced workloads: TCP's p50 over rdma's, marked p50); CPU: both processes' user+sys per op, sys its kernel part; ceiling: TCP's CPU over its user part, the most a CPU-bound workload gains from a transport that costs nothing\n", r.Duration)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tpath\tTCP ops/s\trdma ops/s\trdma/TCP\tTCP CPU/op us\trdma CPU/op us\tCPU rdma/TCP\tTCP sys/op us\tceiling\tTCP p50 us\trdma p50 us\tTCP p99 us\trdma p99 us\trdma paths\t")
	for _, p := range r.pairs() {
		x, y := p[0], p[1]
		by := "x"
		if x.RatioBy != "" {
			by = "x " + x.RatioBy
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f%s\t%.1f\t%.1f\t%.2fx\t%.1f\t%.2fx\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n",
			x.Workload, x.Path, rate(y.OpsPerSec), rate(x.OpsPerSec), x.Ratio, by, y.CPUPerOp, x.CPUPerOp, x.CPURatio, y.SysPerOp, x.Ceiling,
			y.P50, x.P50, y.P99, x.P99, x.RDMAPaths)
	}
	_ = tw.Flush()
}

// rate prints ops/s: whole numbers, or three digits below 100 (a
// failover's is one over its seconds).
func rate(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// svg draws the summary's rdma/TCP throughput ratio per workload, a bar
// per path, with the line of parity.
func (r *report) svg() string {
	pairs := r.pairs()
	var workloads, paths []string
	ratio := map[[2]string]float64{}
	top := 2.0
	for _, p := range pairs {
		x := p[0]
		if !slices.Contains(workloads, x.Workload) {
			workloads = append(workloads, x.Workload)
		}
		if !slices.Contains(paths, x.Path) {
			paths = append(paths, x.Path)
		}
		ratio[[2]string{x.Workload, x.Path}] = x.Ratio
		top = max(top, x.Ratio*1.1)
	}
	const left, width, barH, gap = 170, 600, 12, 10
	rowH := barH*max(len(paths), 1) + gap
	height := 60 + rowH*len(workloads) + 20*len(paths)
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"}
	x := func(v float64) float64 { return left + v/top*width }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", left+width+60, height)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13">rdma / Go TCP throughput (paced workloads: p50 latency, TCP's over rdma's), median of the rounds' ratios (%s)</text>`+"\n", left, r.Started.Format("2006-01-02"))
	for v := 0.0; v <= top; v += 0.5 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="30" x2="%.1f" y2="%d" stroke="%s"/><text x="%.1f" y="%d" text-anchor="middle">%.1f</text>`+"\n",
			x(v), x(v), 40+rowH*len(workloads), map[bool]string{true: "#000", false: "#ddd"}[v == 1], x(v), 52+rowH*len(workloads), v)
	}
	for i, w := range workloads {
		y0 := 36 + i*rowH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y0+rowH/2, w)
		for j, p := range paths {
			v, ok := ratio[[2]string{w, p}]
			if !ok {
				continue
			}
			y := y0 + j*barH
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/><text x="%.1f" y="%d">%.2f</text>`+"\n",
				left, y, x(v)-left, barH-2, colors[j%len(colors)], x(v)+3, y+barH-3, v)
		}
	}
	for j, p := range paths {
		y := 66 + rowH*len(workloads) + 18*j
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			left, y, colors[j%len(colors)], left+18, y+9, p)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
