package main

import (
	"io"

	"github.com/rdmanet/rdma/internal/perfreport"
)

// The report's schema is rdmaperf's, declared once in internal/perfreport.
type (
	report = perfreport.Report
	result = perfreport.Result
)

// readReport decodes and checks a report.
func readReport(r io.Reader) (*report, error) { return perfreport.Read(r) }

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
