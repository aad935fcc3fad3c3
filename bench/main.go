// Command bench runs real applications over rdma and over Go's TCP in the
// same run, client and server in separate processes, and reports for each
// workload its throughput, CPU time per operation (both processes' user
// plus system) and p50/p99 latency, with the rdma/TCP ratio:
//
//   - go-redis v9 against a redcon server: SET and GET in pipelines of 100
//     and one command at a time, 4 connections, and GET on 64;
//   - net/http with keep-alive, 1 KiB and 1 MiB bodies, 8 and 64 clients;
//   - gRPC unary calls and bidirectional streams, 64 at once;
//   - yamux, 64 streams on one connection;
//   - hashicorp/raft, three nodes in three processes on a
//     raft.NetworkTransport: entries applied (every tenth 64 KiB), then
//     the leader killed and the time to a new leader and its first commit.
//
// Every answer is checked; a wrong one fails the run. The paths are soft's
// shared memory ("shm") and soft's TCP path ("tcp", RDMA_SOFT_SHM=0) by
// default, or rdmacore on a host with an RDMA device (-paths rdmacore).
//
//	go run . -rounds 3 -json report.json -svg ratios.svg
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	if os.Getenv(roleEnv) == "server" {
		os.Exit(serveMain())
	}
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	rep, err := run(context.Background(), o, os.Stdout)
	if rep != nil {
		if werr := rep.write(o, os.Stdout); werr != nil {
			fmt.Fprintln(os.Stderr, "bench:", werr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	paths     []string
	rounds    int
	workloads []string // names or prefixes; empty: all
	host      string
	sc        scale
	jsonFile  string
	svgFile   string
	quiet     bool
}

func parseOptions(args []string, errOut io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	paths := fs.String("paths", "shm,tcp", "paths of rdma to run: shm (soft's shared memory), tcp (soft's TCP path), rdmacore")
	rounds := fs.Int("rounds", 3, "rounds; each runs every workload on every path, over TCP and rdma in turn")
	wl := fs.String("workloads", "", "comma-separated workload names or prefixes (redis, http, grpc, yamux, raft, ...); empty: all")
	host := fs.String("host", "", "address to listen on (default $SOFTROCE_IP, else 127.0.0.1)")
	dur := fs.Duration("t", time.Second, "measured time of each workload")
	warm := fs.Duration("warm", 200*time.Millisecond, "unmeasured run before each measurement")
	keys := fs.Int("keys", 1000, "redis keys per worker")
	entries := fs.Int("raft-entries", 10000, "raft entries applied per measurement")
	raftTimeout := fs.Duration("raft-timeout", 0, "raft's heartbeat and election timeouts (0: raft's defaults, 1s)")
	raftIdle := fs.Duration("raft-idle", 2*time.Second, "how long the raft cluster idles (heartbeats only) before its leader is killed")
	jsonFile := fs.String("json", "", "write the JSON report here")
	svgFile := fs.String("svg", "", "draw the rdma/TCP ratios here (SVG)")
	quiet := fs.Bool("q", false, "no line per measurement")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o := options{rounds: *rounds, host: *host, jsonFile: *jsonFile, svgFile: *svgFile, quiet: *quiet,
		sc: scale{dur: *dur, warm: *warm, keys: *keys, raftEntries: *entries, raftTimeout: *raftTimeout, raftIdle: *raftIdle}}
	for _, p := range strings.Split(*paths, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, ok := pathSpecs[p]; !ok {
			fmt.Fprintf(errOut, "bench: unknown path %q (shm, tcp, rdmacore)\n", p)
			return o, fmt.Errorf("unknown path %q", p)
		}
		o.paths = append(o.paths, p)
	}
	for _, w := range strings.Split(*wl, ",") {
		if w = strings.TrimSpace(w); w != "" {
			o.workloads = append(o.workloads, w)
		}
	}
	if o.host == "" {
		o.host = os.Getenv("SOFTROCE_IP")
	}
	if o.host == "" {
		o.host = "127.0.0.1"
	}
	if o.rounds < 1 || len(o.paths) == 0 || o.sc.dur <= 0 || o.sc.keys < 1 || o.sc.raftEntries < 1 {
		fmt.Fprintln(errOut, "bench: -rounds, -t, -keys and -raft-entries must be positive, -paths not empty")
		return o, fmt.Errorf("bad options")
	}
	return o, nil
}

// selected reports whether workload name is among o's.
func (o options) selected(name string) bool {
	if len(o.workloads) == 0 {
		return true
	}
	for _, w := range o.workloads {
		if name == w || strings.HasPrefix(name, w) {
			return true
		}
	}
	return false
}
