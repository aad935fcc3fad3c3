package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is a whole client run: what was run and every result. It is the
// --json output as is.
type report struct {
	Tool       string   `json:"tool"`
	Version    int      `json:"version"`
	Mode       string   `json:"mode"`   // "client" or "loopback"
	Server     string   `json:"server"` // "remote", "in-process" or "separate process"
	Address    string   `json:"address"`
	TCPAddress string   `json:"tcp_address,omitempty"`
	TCPCC      string   `json:"tcp_congestion,omitempty"` // the baseline client's congestion control
	Parallel   int      `json:"parallel"`
	DurationNs int64    `json:"duration_ns,omitempty"`
	Iterations int64    `json:"iterations,omitempty"`
	WarmupNs   int64    `json:"warmup_ns"`
	Rounds     int      `json:"rounds"`
	GoVersion  string   `json:"go_version"`
	CPUs       int      `json:"cpus"`
	Results    []result `json:"results"`
}

// result is one test kind and size over one transport, over all rounds.
type result struct {
	Test      string    `json:"test"` // "stream" or "latency"
	Size      int       `json:"size"`
	Transport string    `json:"transport"`          // "rdma" or "tcp"
	Provider  string    `json:"provider,omitempty"` // rdma's provider
	Parallel  int       `json:"parallel"`
	Rounds    []measure `json:"rounds"`
	// Median is each figure's median over the rounds.
	Median measure `json:"median"`
	// VsTCP is this result over TCP's in the same run: throughput ratio for
	// stream (higher is better), p50 round-trip ratio for latency (lower is
	// better). Absent without a baseline, and for TCP itself.
	VsTCP *float64 `json:"vs_tcp,omitempty"`
	// VsTCPOf names the figure VsTCP compares: "bytes_per_sec" or "p50_ns".
	VsTCPOf string `json:"vs_tcp_of,omitempty"`

	kind uint8
}

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

// finish computes medians and ratios once all rounds are in.
func (r *report) finish() {
	for i := range r.Results {
		r.Results[i].Median = median(r.Results[i].Rounds)
	}
	for i := range r.Results {
		res := &r.Results[i]
		if res.Transport == "tcp" {
			continue
		}
		for j := range r.Results {
			b := &r.Results[j]
			if b.Transport != "tcp" || b.kind != res.kind || b.Size != res.Size {
				continue
			}
			var v float64
			var of string
			if res.kind == kindStream && b.Median.BytesPerSec > 0 {
				v, of = res.Median.BytesPerSec/b.Median.BytesPerSec, "bytes_per_sec"
			} else if res.kind == kindLatency && b.Median.P50Ns > 0 {
				v, of = float64(res.Median.P50Ns)/float64(b.Median.P50Ns), "p50_ns"
			}
			if v > 0 {
				res.VsTCP, res.VsTCPOf = &v, of
			}
		}
	}
}

// median takes each figure's median over ms independently.
func median(ms []measure) measure {
	if len(ms) == 1 {
		return ms[0]
	}
	medF := func(f func(m *measure) float64) float64 {
		v := make([]float64, len(ms))
		for i := range ms {
			v[i] = f(&ms[i])
		}
		slices.Sort(v)
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	medI := func(f func(m *measure) int64) int64 {
		return int64(medF(func(m *measure) float64 { return float64(f(m)) }))
	}
	return measure{
		Bytes:       medI(func(m *measure) int64 { return m.Bytes }),
		Messages:    medI(func(m *measure) int64 { return m.Messages }),
		Seconds:     medF(func(m *measure) float64 { return m.Seconds }),
		BytesPerSec: medF(func(m *measure) float64 { return m.BytesPerSec }),
		MsgsPerSec:  medF(func(m *measure) float64 { return m.MsgsPerSec }),
		MinNs:       medI(func(m *measure) int64 { return m.MinNs }),
		MeanNs:      medI(func(m *measure) int64 { return m.MeanNs }),
		P50Ns:       medI(func(m *measure) int64 { return m.P50Ns }),
		P99Ns:       medI(func(m *measure) int64 { return m.P99Ns }),
		P999Ns:      medI(func(m *measure) int64 { return m.P999Ns }),
		MaxNs:       medI(func(m *measure) int64 { return m.MaxNs }),
		ClientCPU:   medF(func(m *measure) float64 { return m.ClientCPU }),
		ServerCPU:   medF(func(m *measure) float64 { return m.ServerCPU }),

		ClientCPUPerMsgNs: medI(func(m *measure) int64 { return m.ClientCPUPerMsgNs }),
		ServerCPUPerMsgNs: medI(func(m *measure) int64 { return m.ServerCPUPerMsgNs }),
		Conn:              medianConn(ms, medF),
	}
}

// medianConn takes each conn figure's median over ms, which all have them
// or none.
func medianConn(ms []measure, medF func(f func(m *measure) float64) float64) *connFigures {
	if ms[0].Conn == nil {
		return nil
	}
	f := func(g func(c *connFigures) float64) float64 {
		return medF(func(m *measure) float64 {
			if m.Conn == nil {
				return 0
			}
			return g(m.Conn)
		})
	}
	return &connFigures{
		Path:              ms[0].Conn.Path,
		WriteWaitsPerMsg:  f(func(c *connFigures) float64 { return c.WriteWaitsPerMsg }),
		WriteWaitNsPerMsg: f(func(c *connFigures) float64 { return c.WriteWaitNsPerMsg }),
		SleepsPerMsg:      f(func(c *connFigures) float64 { return c.SleepsPerMsg }),
		SpinsPerMsg:       f(func(c *connFigures) float64 { return c.SpinsPerMsg }),
		SpinsCaughtShare:  f(func(c *connFigures) float64 { return c.SpinsCaughtShare }),
		WireMsgsPerMsg:    f(func(c *connFigures) float64 { return c.WireMsgsPerMsg }),
		RndvPerMsg:        f(func(c *connFigures) float64 { return c.RndvPerMsg }),
		ReadsAtOnce:       f(func(c *connFigures) float64 { return c.ReadsAtOnce }),
		ReadsHanded:       f(func(c *connFigures) float64 { return c.ReadsHanded }),
		ReadsSpun:         f(func(c *connFigures) float64 { return c.ReadsSpun }),
		ReadsSlept:        f(func(c *connFigures) float64 { return c.ReadsSlept }),
		RingGrowths:       uint64(f(func(c *connFigures) float64 { return float64(c.RingGrowths) })),
	}
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable prints the results as aligned tables, one per test kind.
func (r *report) writeTable(w io.Writer) error {
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
		lw = max(lw, len(res.label()))
		if res.kind == kindStream {
			stream = append(stream, res)
		} else {
			lat = append(lat, res)
		}
	}
	writeKindTable(&b, "stream bandwidth, client -> server (vs tcp: throughput ratio, higher is better)",
		"MiB/s\tGbit/s\tmsg/s\tcpu cli\tcpu srv\tcpu/msg\tvs tcp", lw, stream, func(tw io.Writer, res *result) {
			m := res.Median
			fmt.Fprintf(tw, "%.1f\t%.2f\t%.0f\t%s\t%s\t%s\t%s",
				m.BytesPerSec/(1<<20), m.BytesPerSec*8/1e9, m.MsgsPerSec, cpuText(m.ClientCPU), r.serverCPUText(m),
				usText(m.ClientCPUPerMsgNs+m.ServerCPUPerMsgNs), ratioText(res.VsTCP))
		})
	writeKindTable(&b, "round-trip latency, ping-pong of the message size (vs tcp: p50 ratio, lower is better)",
		"msg/s\tmin\tp50\tp99\tp99.9\tmax\tcpu cli\tcpu srv\tcpu/msg\tvs tcp", lw, lat, func(tw io.Writer, res *result) {
			m := res.Median
			fmt.Fprintf(tw, "%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", m.MsgsPerSec,
				usText(m.MinNs), usText(m.P50Ns), usText(m.P99Ns), usText(m.P999Ns), usText(m.MaxNs),
				cpuText(m.ClientCPU), r.serverCPUText(m), usText(m.ClientCPUPerMsgNs+m.ServerCPUPerMsgNs), ratioText(res.VsTCP))
		})
	r.writeConnTable(&b, lw)
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
		fmt.Fprintf(tw, "%s\t%-*s\t", formatSize(res.Size), lw, res.label())
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

func (res *result) label() string {
	if res.Provider != "" {
		return res.Transport + "/" + res.Provider
	}
	return res.Transport
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
func (r *report) serverCPUText(m measure) string {
	if r.Server == "in-process" {
		return "-"
	}
	return cpuText(m.ServerCPU)
}

// writeConnTable writes what the client's rdma conns counted, per message
// of each test (medians over the rounds).
func (r *report) writeConnTable(b *strings.Builder, lw int) {
	any := false
	for _, res := range r.Results {
		any = any || res.Median.Conn != nil
	}
	if !any {
		return
	}
	fmt.Fprintf(b, "\nrdma conn stats, client side, per message of the test (latency: per round trip); rndv: rendezvous transfers (zero-copy Writes); reads: share at once/handed/spun/slept\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "test\tsize\t%-*s\tpath\twire msgs\trndv\twrite waits\twait\tspins\tcaught\tsleeps\treads\tgrowths\t\n", lw, "transport")
	for _, res := range r.Results {
		c := res.Median.Conn
		if c == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%-*s\t%s\t%.2f\t%.2f\t%.3f\t%s\t%.2f\t%.0f%%\t%.2f\t%.0f/%.0f/%.0f/%.0f%%\t%d\t\n",
			res.Test, formatSize(res.Size), lw, res.label(), c.Path, c.WireMsgsPerMsg, c.RndvPerMsg, c.WriteWaitsPerMsg, usText(int64(c.WriteWaitNsPerMsg)),
			c.SpinsPerMsg, 100*c.SpinsCaughtShare, c.SleepsPerMsg,
			100*c.ReadsAtOnce, 100*c.ReadsHanded, 100*c.ReadsSpun, 100*c.ReadsSlept, c.RingGrowths)
	}
	tw.Flush()
}
