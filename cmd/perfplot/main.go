// Command perfplot draws rdmaperf's results: stream throughput and p50
// round-trip latency against message size, each transport (rdma with its
// provider, and tcp) as one line, side by side in one picture. make bench
// runs it on build/bench/rdmaperf.json.
//
//	go -C cmd/perfplot run . [-title text] rdmaperf.json out.svg [out.png ...]
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
)

func main() {
	title := flag.String("title", "", "title above the plots (default: what the report says about the run)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: perfplot [-title text] rdmaperf.json out.svg [out.png ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Args()[1:], *title); err != nil {
		fmt.Fprintln(os.Stderr, "perfplot:", err)
		os.Exit(1)
	}
}

func run(in string, outs []string, title string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := readReport(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	for _, out := range outs {
		if err := render(rep, title, out); err != nil {
			return err
		}
	}
	return nil
}
