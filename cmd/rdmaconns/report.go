package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

func report(w io.Writer, o *options, rs []result) error {
	if o.json {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rs)
	}
	var base *result
	for i := range rs {
		if rs[i].Path == "net" {
			base = &rs[i]
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "path\tconns\tsetup mean\t(dial)\tp50\tp99\tx net\tcpu/conn\tresident/endpoint\tregistered/endpoint\tfds/endpoint\tgoroutines/endpoint\t(heap\tstacks\tshmem)\t\n")
	for _, r := range rs {
		ratio := "-"
		if base != nil && base.SetupMean > 0 {
			ratio = fmt.Sprintf("%.2f", r.SetupMean/base.SetupMean)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f us\t%.0f us\t%.0f us\t%.0f us\t%s\t%.0f us\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t\n",
			r.Path, r.Conns, r.SetupMean, r.DialMean, r.SetupP50, r.SetupP99, ratio, r.CPUPerConn,
			kib(r.RSSPerEP), kib(r.RegPerEP), r.FDsPerEP, r.GoroutPerEP,
			kib(r.HeapPerEP), kib(r.StackPerEP), kib(r.ShmemPerEP))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if s := r.Stats; s != nil {
			paths := make([]string, 0, len(s.Paths))
			for p, n := range s.Paths {
				paths = append(paths, fmt.Sprintf("%d on %s", n, p))
			}
			sort.Strings(paths)
			fmt.Fprintf(w, "%s: rdma stats of the %d endpoints held: %s; ring+send buffer %s, %.1f messages, %.1f sleeps, %.2f keepalives per endpoint; %d failed\n",
				r.Path, s.Endpoints, strings.Join(paths, ", "), kib(s.BuffersPerEP), s.MessagesPerEP, s.SleepsPerEP, s.KeepAlivesPerEP, s.Failed)
		}
	}
	if o.phases {
		return reportPhases(w, rs)
	}
	return nil
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }
