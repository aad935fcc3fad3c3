package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
)

// options is a parsed, validated command line.
type options struct {
	n     int
	paths []string // "net" first, then the rdma paths asked for
	addr  string   // IP address to listen and dial on
	json  bool
	quiet bool
	ring  int // rdma.Config.RingSize (0: the default)
	// phases times the setup's steps (the library's marks and the
	// echo's) and reports them after the figures.
	phases bool

	memProfile string // heap profile while the connections are held
	cpuProfile string
}

const (
	defaultConns = 1000
	maxConns     = 100000
	defaultAddr  = "127.0.0.60"
)

var knownPaths = map[string]bool{"shm": true, "tcp": true, "rdmacore": true}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("rdmaconns", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: rdmaconns [-n 1000] [-paths shm,tcp] [-addr 127.0.0.60] [-json]\n\n")
		fs.PrintDefaults()
	}
	o := &options{}
	var paths string
	fs.IntVar(&o.n, "n", defaultConns, "`connections` to open and hold per path")
	fs.StringVar(&paths, "paths", "shm,tcp", "comma-separated `paths`: shm and tcp (soft provider's shared-memory and TCP paths), rdmacore; Go's TCP (net) always runs first")
	fs.StringVar(&o.addr, "addr", defaultAddr, "`IP` address to listen on and dial (loopback, or the VM's own address)")
	fs.IntVar(&o.ring, "ring", 0, "rdma.Config.RingSize in `bytes` (0: the library's default); the send buffer follows it")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON")
	fs.BoolVar(&o.quiet, "q", false, "no progress lines on stderr")
	fs.BoolVar(&o.phases, "phases", false, "time the setup's steps, mean from the dial's start, and report them")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `file`")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile to `file`.PATH while each path's connections are held")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if o.n < 1 || o.n > maxConns {
		return nil, fmt.Errorf("-n %d: want 1 to %d", o.n, maxConns)
	}
	if o.ring < 0 {
		return nil, fmt.Errorf("-ring %d: want a size in bytes, or 0 for the default", o.ring)
	}
	if net.ParseIP(o.addr) == nil {
		return nil, fmt.Errorf("-addr %q: not an IP address", o.addr)
	}
	o.paths = []string{"net"}
	for _, p := range strings.Split(paths, ",") {
		p = strings.TrimSpace(p)
		if !knownPaths[p] {
			return nil, fmt.Errorf("-paths: unknown path %q (want shm, tcp or rdmacore)", p)
		}
		o.paths = append(o.paths, p)
	}
	return o, nil
}
