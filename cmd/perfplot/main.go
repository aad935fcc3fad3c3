// Command perfplot draws rdmaperf's results: stream throughput and p50
// round-trip latency against message size, each transport (rdma with its
// provider, and tcp) as one line, side by side in one picture. make bench
// runs it on build/bench/rdmaperf.json (the copying path) and
// rdmaperf-buffers.json (rdmaperf -buffers -memcpy: zero-copy from and into
// rdma.Buffers, and the same run's memcpy bandwidth as the reference line).
//
//	go -C cmd/perfplot run . [-title text] rdmaperf.json [more.json ...] out.svg [out.png ...]
//
// Arguments ending in .json are reports, merged: a later report adds the
// series the earlier ones do not have.
//
// The format of each output follows its extension: .svg, .png, .pdf.
//
// It is a module of its own so that the plotting library (gonum.org/v1/plot)
// and its fonts and image packages stay out of what programs importing
// github.com/rdmanet/rdma download and build.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	title := flag.String("title", "", "title above the plots (default: what the report says about the run)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: perfplot [-title text] rdmaperf.json [more.json ...] out.svg [out.png ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	var ins, outs []string
	for _, a := range flag.Args() {
		if strings.HasSuffix(a, ".json") {
			ins = append(ins, a)
		} else {
			outs = append(outs, a)
		}
	}
	if len(ins) == 0 || len(outs) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(ins, outs, *title); err != nil {
		fmt.Fprintln(os.Stderr, "perfplot:", err)
		os.Exit(1)
	}
}

// run draws the reports ins, merged: the first report, then the series of
// each later one that the earlier ones do not have (make bench's copying
// run, then its Buffers run with the memcpy reference, whose tcp series
// repeats the first's).
func run(ins []string, outs []string, title string) error {
	var rep *report
	for _, in := range ins {
		r, err := readFile(in)
		if err != nil {
			return err
		}
		if rep == nil {
			rep = r
			continue
		}
		have := map[string]bool{}
		for _, x := range rep.Results {
			have[x.Transport+"/"+x.Provider] = true
		}
		for _, x := range r.Results {
			if !have[x.Transport+"/"+x.Provider] {
				rep.Results = append(rep.Results, x)
			}
		}
	}
	for _, out := range outs {
		if err := render(rep, title, out); err != nil {
			return err
		}
	}
	return nil
}

func readFile(name string) (*report, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep, err := readReport(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rep, nil
}
