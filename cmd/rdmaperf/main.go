// Command rdmaperf measures rdma.Conn: stream bandwidth and round-trip
// latency (p50/p99/p99.9) for message sizes from 1 B to 4 MiB, on one or
// several connections, beside TCP through the same code in the same run.
//
//	rdmaperf -s [-addr 127.0.0.1:18515]   # server: serves any client run
//	rdmaperf -c 127.0.0.1:18515           # client
//	rdmaperf -loopback [-fork]            # both, on 127.0.0.1
//
// Every test connection starts with a small control header (test kind,
// message size, duration or count), so the server needs no flags beyond
// where to listen. See -h for everything else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintf(os.Stderr, "rdmaperf: %v\n", err)
		os.Exit(1)
	}
}

// run is the whole program: parse args, then serve, or run a client and
// print its report on stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.server {
		return runServer(ctx, o, stdout, stderr)
	}
	rep, err := runClient(ctx, o, stderr)
	if err != nil {
		return err
	}
	if o.jsonFile != "" {
		if err := writeJSONFile(rep, o.jsonFile); err != nil {
			return err
		}
	}
	if o.json {
		return rep.writeJSON(stdout)
	}
	return rep.writeTable(stdout)
}

func writeJSONFile(rep *report, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.writeJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
