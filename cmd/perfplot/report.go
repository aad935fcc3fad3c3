package main

import (
	"encoding/json"
	"fmt"
	"io"
)

// report is the part of rdmaperf's JSON report (rdmaperf -json-file) that
// the plots use. It is declared here rather than imported: this module reads
// the file, and keeps its plotting dependencies out of the rdma module.
type report struct {
	Tool      string   `json:"tool"`
	Mode      string   `json:"mode"`
	Server    string   `json:"server"`
	Parallel  int      `json:"parallel"`
	Rounds    int      `json:"rounds"`
	GoVersion string   `json:"go_version"`
	CPUs      int      `json:"cpus"`
	Results   []result `json:"results"`
}

type result struct {
	Test      string  `json:"test"` // "stream" or "latency"
	Size      int     `json:"size"`
	Transport string  `json:"transport"` // "rdma" or "tcp"
	Provider  string  `json:"provider"`
	Median    measure `json:"median"`
}

type measure struct {
	BytesPerSec float64 `json:"bytes_per_sec"`
	P50Ns       int64   `json:"p50_ns"`
}

// readReport decodes and checks a report.
func readReport(r io.Reader) (*report, error) {
	var rep report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, err
	}
	if rep.Tool != "rdmaperf" {
		return nil, fmt.Errorf("not an rdmaperf report (tool %q)", rep.Tool)
	}
	if len(rep.Results) == 0 {
		return nil, fmt.Errorf("the report has no results")
	}
	return &rep, nil
}

// series is one line of a plot: a transport's figure at each size.
type series struct {
	name  string // "rdma (soft)", "tcp"
	sizes []int
	ys    []float64
}

// collect returns, for test, one series per transport in the order they
// first appear, with y(result) at each size, sizes ascending.
func collect(rep *report, test string, y func(result) float64) []series {
	var out []series
	index := map[string]int{}
	for _, r := range rep.Results {
		if r.Test != test {
			continue
		}
		name := r.Transport
		if r.Provider != "" {
			name += " (" + r.Provider + ")"
		}
		i, ok := index[name]
		if !ok {
			i = len(out)
			index[name] = i
			out = append(out, series{name: name})
		}
		s := &out[i]
		// insertion keeps sizes ascending whatever the report's order
		j := len(s.sizes)
		for j > 0 && s.sizes[j-1] > r.Size {
			j--
		}
		s.sizes = append(s.sizes[:j], append([]int{r.Size}, s.sizes[j:]...)...)
		s.ys = append(s.ys[:j], append([]float64{y(r)}, s.ys[j:]...)...)
	}
	return out
}
