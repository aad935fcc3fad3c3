// Package perfreport is the JSON report that cmd/rdmaperf writes
// (rdmaperf -json, -json-file) and cmd/perfplot reads: one schema, declared
// once. It has no dependencies beyond the standard library, so the plotting
// module (a module of its own, for its plotting dependencies) imports it
// without pulling in the rdma package.
package perfreport

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Tool is the value of Report.Tool in every rdmaperf report.
const Tool = "rdmaperf"

// Test kinds, as Result.Test names them.
const (
	TestStream  = "stream"  // bandwidth, client to server
	TestLatency = "latency" // round trips of the message size
)

// Report is a whole client run: what was run and every result.
type Report struct {
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
	Results    []Result `json:"results"`
}

// Result is one test kind and size over one transport, over all rounds.
type Result struct {
	Test      string    `json:"test"` // TestStream or TestLatency
	Size      int       `json:"size"`
	Transport string    `json:"transport"`          // "rdma", "tcp" or "memcpy"
	Provider  string    `json:"provider,omitempty"` // rdma's provider
	Parallel  int       `json:"parallel"`
	Rounds    []Measure `json:"rounds"`
	// Median is each figure's median over the rounds.
	Median Measure `json:"median"`
	// VsTCP is this result over TCP's in the same run: throughput ratio for
	// stream (higher is better), p50 round-trip ratio for latency (lower is
	// better). Absent without a baseline, and for TCP itself.
	VsTCP *float64 `json:"vs_tcp,omitempty"`
	// VsTCPOf names the figure VsTCP compares: "bytes_per_sec" or "p50_ns".
	VsTCPOf string `json:"vs_tcp_of,omitempty"`
}

// Label is the result's transport with its provider, as tables and plots
// name it: "rdma/soft", "tcp".
func (r *Result) Label() string {
	if r.Provider != "" {
		return r.Transport + "/" + r.Provider
	}
	return r.Transport
}

// Measure is one round's (or the median of several rounds') figures.
type Measure struct {
	Bytes       int64   `json:"bytes"`
	Messages    int64   `json:"messages"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	// Round-trip latency, in nanoseconds (latency tests only).
	MinNs  int64 `json:"min_ns,omitempty"`
	MeanNs int64 `json:"mean_ns,omitempty"`
	P50Ns  int64 `json:"p50_ns,omitempty"`
	P99Ns  int64 `json:"p99_ns,omitempty"`
	P999Ns int64 `json:"p999_ns,omitempty"`
	MaxNs  int64 `json:"max_ns,omitempty"`
	// CPU time over wall time, warm-up included (1 = one core all the
	// time), of the client process and of the server process. With an
	// in-process server both are the same process's.
	ClientCPU float64 `json:"client_cpu"`
	ServerCPU float64 `json:"server_cpu"`
	// CPU time (user plus system) per message, in nanoseconds, of the
	// client process and of the server process, warm-up included on both
	// sides (a latency test's message is one round trip). With an
	// in-process server, the client's figure counts both ends and the
	// server's is 0.
	ClientCPUPerMsgNs int64 `json:"client_cpu_per_msg_ns"`
	ServerCPUPerMsgNs int64 `json:"server_cpu_per_msg_ns"`
	// Conn is what the client's rdma conns counted (rdma.ConnStats), per
	// message as above, warm-up included; absent for TCP.
	Conn *ConnFigures `json:"conn,omitempty"`
}

// ConnFigures are the client conns' statistics over one test, per message
// of the test (a latency test's message is a round trip). A message of
// the test is not a message of rdma.ConnStats, which counts data writes on
// the wire.
type ConnFigures struct {
	Path              string  `json:"path"`                  // rdma.ConnStats.Path: rdmacore, soft-shm, soft-tcp
	WriteWaitsPerMsg  float64 `json:"write_waits_per_msg"`   // Writes' waits for credits, peer ring or send buffer
	WriteWaitNsPerMsg float64 `json:"write_wait_ns_per_msg"` // and the time they waited
	SleepsPerMsg      float64 `json:"sleeps_per_msg"`        // sleeps on the completion channel
	SpinsPerMsg       float64 `json:"spins_per_msg"`         // busy-polls begun
	SpinsCaughtShare  float64 `json:"spins_caught_share"`    // of those, the share that caught a completion
	RefusedPerMsg     float64 `json:"spins_refused_per_msg"` // waits that would have spun but the process's spin limit said no
	WireMsgsPerMsg    float64 `json:"wire_msgs_per_msg"`     // data writes on the wire, both ways
	RndvPerMsg        float64 `json:"rndv_per_msg"`          // rendezvous transfers, both ways (zero-copy Writes)
	// Reads that returned data, by how the data came: the shares of
	// at_once, handed (another caller polled it in), spun and slept.
	ReadsAtOnce float64 `json:"reads_at_once"`
	ReadsHanded float64 `json:"reads_handed"`
	ReadsSpun   float64 `json:"reads_spun"`
	ReadsSlept  float64 `json:"reads_slept"`
	RingGrowths uint64  `json:"ring_growths"` // receive rings and send buffers that grew
}

// Finish computes each result's medians over its rounds, then each non-TCP
// result's ratio to the TCP result of the same test and size.
func (r *Report) Finish() {
	for i := range r.Results {
		r.Results[i].Median = Median(r.Results[i].Rounds)
	}
	for i := range r.Results {
		res := &r.Results[i]
		if res.Transport == "tcp" {
			continue
		}
		for j := range r.Results {
			b := &r.Results[j]
			if b.Transport != "tcp" || b.Test != res.Test || b.Size != res.Size {
				continue
			}
			var v float64
			var of string
			if res.Test == TestStream && b.Median.BytesPerSec > 0 {
				v, of = res.Median.BytesPerSec/b.Median.BytesPerSec, "bytes_per_sec"
			} else if res.Test == TestLatency && b.Median.P50Ns > 0 {
				v, of = float64(res.Median.P50Ns)/float64(b.Median.P50Ns), "p50_ns"
			}
			if v > 0 {
				res.VsTCP, res.VsTCPOf = &v, of
			}
		}
	}
}

// Median takes each figure's median over ms independently; the zero
// Measure for none.
func Median(ms []Measure) Measure {
	switch len(ms) {
	case 0:
		return Measure{}
	case 1:
		return ms[0]
	}
	medF := func(f func(m *Measure) float64) float64 {
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
	medI := func(f func(m *Measure) int64) int64 {
		return int64(medF(func(m *Measure) float64 { return float64(f(m)) }))
	}
	return Measure{
		Bytes:       medI(func(m *Measure) int64 { return m.Bytes }),
		Messages:    medI(func(m *Measure) int64 { return m.Messages }),
		Seconds:     medF(func(m *Measure) float64 { return m.Seconds }),
		BytesPerSec: medF(func(m *Measure) float64 { return m.BytesPerSec }),
		MsgsPerSec:  medF(func(m *Measure) float64 { return m.MsgsPerSec }),
		MinNs:       medI(func(m *Measure) int64 { return m.MinNs }),
		MeanNs:      medI(func(m *Measure) int64 { return m.MeanNs }),
		P50Ns:       medI(func(m *Measure) int64 { return m.P50Ns }),
		P99Ns:       medI(func(m *Measure) int64 { return m.P99Ns }),
		P999Ns:      medI(func(m *Measure) int64 { return m.P999Ns }),
		MaxNs:       medI(func(m *Measure) int64 { return m.MaxNs }),
		ClientCPU:   medF(func(m *Measure) float64 { return m.ClientCPU }),
		ServerCPU:   medF(func(m *Measure) float64 { return m.ServerCPU }),

		ClientCPUPerMsgNs: medI(func(m *Measure) int64 { return m.ClientCPUPerMsgNs }),
		ServerCPUPerMsgNs: medI(func(m *Measure) int64 { return m.ServerCPUPerMsgNs }),
		Conn:              medianConn(ms, medF),
	}
}

// medianConn takes each conn figure's median over ms, which all have them
// or none.
func medianConn(ms []Measure, medF func(f func(m *Measure) float64) float64) *ConnFigures {
	if ms[0].Conn == nil {
		return nil
	}
	f := func(g func(c *ConnFigures) float64) float64 {
		return medF(func(m *Measure) float64 {
			if m.Conn == nil {
				return 0
			}
			return g(m.Conn)
		})
	}
	return &ConnFigures{
		Path:              ms[0].Conn.Path,
		WriteWaitsPerMsg:  f(func(c *ConnFigures) float64 { return c.WriteWaitsPerMsg }),
		WriteWaitNsPerMsg: f(func(c *ConnFigures) float64 { return c.WriteWaitNsPerMsg }),
		SleepsPerMsg:      f(func(c *ConnFigures) float64 { return c.SleepsPerMsg }),
		SpinsPerMsg:       f(func(c *ConnFigures) float64 { return c.SpinsPerMsg }),
		SpinsCaughtShare:  f(func(c *ConnFigures) float64 { return c.SpinsCaughtShare }),
		RefusedPerMsg:     f(func(c *ConnFigures) float64 { return c.RefusedPerMsg }),
		WireMsgsPerMsg:    f(func(c *ConnFigures) float64 { return c.WireMsgsPerMsg }),
		RndvPerMsg:        f(func(c *ConnFigures) float64 { return c.RndvPerMsg }),
		ReadsAtOnce:       f(func(c *ConnFigures) float64 { return c.ReadsAtOnce }),
		ReadsHanded:       f(func(c *ConnFigures) float64 { return c.ReadsHanded }),
		ReadsSpun:         f(func(c *ConnFigures) float64 { return c.ReadsSpun }),
		ReadsSlept:        f(func(c *ConnFigures) float64 { return c.ReadsSlept }),
		RingGrowths:       uint64(f(func(c *ConnFigures) float64 { return float64(c.RingGrowths) })),
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Read decodes a report and checks that it is one: written by rdmaperf,
// with at least one result, each of a known test.
func Read(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, err
	}
	if r.Tool != Tool {
		return nil, fmt.Errorf("not an rdmaperf report (tool %q)", r.Tool)
	}
	if len(r.Results) == 0 {
		return nil, fmt.Errorf("the report has no results")
	}
	for i, res := range r.Results {
		if res.Test != TestStream && res.Test != TestLatency {
			return nil, fmt.Errorf("result %d: unknown test %q", i, res.Test)
		}
	}
	return &r, nil
}
