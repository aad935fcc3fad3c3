package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdmanet/rdma/internal/perfreport"
)

// The report's schema (the --json output as is) is declared once, in
// internal/perfreport, which cmd/perfplot reads too.
type (
	report      = perfreport.Report
	result      = perfreport.Result
	measure     = perfreport.Measure
	connFigures = perfreport.ConnFigures
)

func newReport(o *options) *report {
	r := &report{
		Tool: "rdmaperf", Version: protoVersion, Mode: "client", Server: "remote",
		Address: o.addr, Parallel: o.parallel, WarmupNs: int64(o.warmup), Rounds: o.rounds,
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
	}
	if o.baseline {
		r.TCPAddress, r.TCPCC = o.tcpAddr, baselineCC(o.tcpCC)
	}
	if o.iterations > 0 {
		r.Iterations = o.iterations
	} else {
		r.DurationNs = int64(o.duration)
	}
	if o.loopback {
		r.Mode, r.Server = "loopback", "in-process"
		if o.fork {
			r.Server = "separate process"
		}
	}
	return r
}

// writeTable prints the results as aligned tables, one per test kind.
func writeTable(r *report, w io.Writer) error {
	var b strings.Builder
	how := fmt.Sprintf("%v per test after %v warm-up", time.Duration(r.DurationNs), time.Duration(r.WarmupNs))
	if r.Iterations > 0 {
		how = fmt.Sprintf("%d messages per connection per test after %v warm-up", r.Iterations, time.Duration(r.WarmupNs))
	}
	rounds := "1 round"
	if r.Rounds > 1 {
		rounds = fmt.Sprintf("median of %d rounds", r.Rounds)
	}
	fmt.Fprintf(&b, "rdmaperf %s: server %s (%s), %s; P=%d; %s; %s; %s, %d CPUs\n",
		r.Mode, r.Address, r.Server, baselineText(r), r.Parallel, how, rounds, r.GoVersion, r.CPUs)

	var stream, lat []result
	lw := 0
	for _, res := range r.Results {
		lw = max(lw, len(res.Label()))
		if res.Test == perfreport.TestStream {
			stream = append(stream, res)
		} else {
			lat = append(lat, res)
		}
	}
	writeKindTable(&b, "stream bandwidth, client -> server (vs tcp: throughput ratio, higher is better)",
		"MiB/s\tGbit/s\tmsg/s\tcpu cli\tcpu srv\tcpu/msg\tvs tcp", lw, stream, func(tw io.Writer, res *result) {
			m := res.Median
			fmt.Fprintf(tw, "%.1f\t%.2f\t%.0f\t%s\t%s\t%s\t%s",
				m.BytesPerSec/(1<<20), m.BytesPerSec*8/1e9, m.MsgsPerSec, cpuText(m.ClientCPU), serverCPUText(r, m),
				usText(m.ClientCPUPerMsgNs+m.ServerCPUPerMsgNs), ratioText(res.VsTCP))
		})
	writeKindTable(&b, "round-trip latency, ping-pong of the message size (vs tcp: p50 ratio, lower is better)",
		"msg/s\tmin\tp50\tp99\tp99.9\tmax\tcpu cli\tcpu srv\tcpu/msg\tvs tcp", lw, lat, func(tw io.Writer, res *result) {
			m := res.Median
			fmt.Fprintf(tw, "%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", m.MsgsPerSec,
				usText(m.MinNs), usText(m.P50Ns), usText(m.P99Ns), usText(m.P999Ns), usText(m.MaxNs),
				cpuText(m.ClientCPU), serverCPUText(r, m), usText(m.ClientCPUPerMsgNs+m.ServerCPUPerMsgNs), ratioText(res.VsTCP))
		})
	writeConnTable(r, &b, lw)
	fmt.Fprintf(&b, "\ncpu: CPU time over wall time of the client and the server process (100%% = one core);"+
		" cpu/msg: their CPU time (user+system) per message, summed (latency: per round trip)")
	if r.Server == "in-process" {
		fmt.Fprintf(&b, "; one process here, so cpu cli counts both ends")
	}
	fmt.Fprintf(&b, "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeKindTable writes the table of one test kind, if it has results:
// the title, then a row per result with its size and label followed by the
// columns (cols, tab-separated) that row writes.
func writeKindTable(b *strings.Builder, title, cols string, lw int, results []result, row func(tw io.Writer, res *result)) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s\n", title)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "size\t%-*s\t%s\t\n", lw, "transport", cols)
	for i := range results {
		res := &results[i]
		fmt.Fprintf(tw, "%s\t%-*s\t", formatSize(res.Size), lw, res.Label())
		row(tw, res)
		fmt.Fprintf(tw, "\t\n")
	}
	tw.Flush()
}

func baselineText(r *report) string {
	if r.TCPAddress == "" {
		return "no TCP baseline"
	}
	if r.TCPCC != "" {
		return "TCP baseline " + r.TCPAddress + " (" + r.TCPCC + ")"
	}
	return "TCP baseline " + r.TCPAddress
}

func ratioText(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *v)
}

func usText(ns int64) string {
	us := float64(ns) / 1e3
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2fms", us/1e3)
	case us >= 100:
		return fmt.Sprintf("%.1fus", us)
	}
	return fmt.Sprintf("%.2fus", us)
}

func cpuText(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }

// serverCPUText: an in-process server's CPU is already in the client's.
func serverCPUText(r *report, m measure) string {
	if r.Server == "in-process" {
		return "-"
	}
	return cpuText(m.ServerCPU)
}

// writeConnTable writes what the client's rdma conns counted, per message
// of each test (medians over the rounds).
func writeConnTable(r *report, b *strings.Builder, lw int) {
	any := false
	for _, res := range r.Results {
		any = any || res.Median.Conn != nil
	}
	if !any {
		return
	}
	fmt.Fprintf(b, "\nrdma conn stats, client side, per message of the test (latency: per round trip); rndv: rendezvous transfers (zero-copy Writes); reads: share at once/handed/spun/slept\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "test\tsize\t%-*s\tpath\twire msgs\trndv\twrite waits\twait\tspins\tcaught\trefused\tsleeps\treads\tgrowths\t\n", lw, "transport")
	for _, res := range r.Results {
		c := res.Median.Conn
		if c == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%-*s\t%s\t%.2f\t%.2f\t%.3f\t%s\t%.2f\t%.0f%%\t%.2f\t%.2f\t%.0f/%.0f/%.0f/%.0f%%\t%d\t\n",
			res.Test, formatSize(res.Size), lw, res.Label(), c.Path, c.WireMsgsPerMsg, c.RndvPerMsg, c.WriteWaitsPerMsg, usText(int64(c.WriteWaitNsPerMsg)),
			c.SpinsPerMsg, 100*c.SpinsCaughtShare, c.RefusedPerMsg, c.SleepsPerMsg,
			100*c.ReadsAtOnce, 100*c.ReadsHanded, 100*c.ReadsSpun, 100*c.ReadsSlept, c.RingGrowths)
	}
	tw.Flush()
}
