package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// options is a parsed, validated command line.
type options struct {
	server   bool
	client   string // -c: the server's rdma address
	loopback bool
	fork     bool // -loopback with the server in a child process
	child    bool // internal: the server side of -fork

	addr     string // -s, -loopback: where to listen for rdma
	tcpAddr  string // the TCP baseline's address ("" : derived from addr)
	provider string
	baseline bool   // run each test over TCP too
	tcpCC    string // -tcp-cc: the TCP baseline's congestion control ("": the system's)

	tests      []uint8 // kindStream, kindLatency
	sizes      []int   // nil: 64 KiB for stream, 64 B for latency
	parallel   int
	duration   time.Duration
	iterations int64
	rounds     int
	warmup     time.Duration
	json       bool
	jsonFile   string // also write the JSON report here
	quiet      bool
	ringSize   int
	pollTime   time.Duration
	cpuProfile string // write a CPU profile of this process (-fork: the server's to <file>.server)
	buffers    bool   // send and receive from rdma.Buffers, on both ends
	rndv       int    // Config.RendezvousThreshold (0: default)
	memcpy     bool   // also measure memcpy bandwidth at the stream sizes
}

const (
	defaultAddr       = "127.0.0.1:18515"
	loopbackAddr      = "127.0.0.1:0"
	defaultStreamSize = 64 << 10
	defaultLatSize    = 64
	maxParallel       = 256
	maxRounds         = 1000
)

const usageText = `rdmaperf measures rdma.Conn stream bandwidth and round-trip latency,
beside TCP through the same code, in the manner of ib_send_bw/ib_send_lat,
qperf and iperf3.

  rdmaperf -s [-addr 127.0.0.1:18515]       serve any client run (rdma on
                                            -addr, TCP baseline on -tcp-addr)
  rdmaperf -c 127.0.0.1:18515 [flags]       run tests against a server
  rdmaperf -loopback [-fork] [flags]        server and client in one run on
                                            127.0.0.1; -fork puts the server
                                            in a separate process

Examples:
  rdmaperf -loopback -fork -rounds 5
  rdmaperf -loopback -test latency -sizes 1,64,4K,64K,1M,4M -json
  rdmaperf -c 127.0.0.1:18515 -baseline tcp -P 4 -t 5s

Flags:
`

// parseOptions parses args (without the program name). Output for -h and
// for flag errors goes to stderr; -h returns flag.ErrHelp.
func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("rdmaperf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	o := &options{}
	var (
		tests, sizes, baseline, ring string
	)
	fs.BoolVar(&o.server, "s", false, "run as a server")
	fs.StringVar(&o.client, "c", "", "run as a client of the rdmaperf server at this `host:port`")
	fs.BoolVar(&o.loopback, "loopback", false, "run a server and a client in one invocation, on 127.0.0.1")
	fs.BoolVar(&o.fork, "fork", false, "with -loopback: run the server as a separate process (a re-exec of this program)")
	fs.BoolVar(&o.child, "child", false, "internal: the server process of -fork")
	fs.StringVar(&o.addr, "addr", defaultAddr, "rdma `address` the server listens on (-loopback: a free port on 127.0.0.1)")
	fs.StringVar(&o.tcpAddr, "tcp-addr", "", "TCP baseline `address`: the server listens there, the client dials it (default: the rdma host, port+1)")
	fs.StringVar(&o.provider, "provider", "", "verbs `provider`: soft, rdmacore or auto (default: $RDMA_PROVIDER, else auto)")
	fs.StringVar(&baseline, "baseline", "", "`tcp` to run every test over TCP too (default with -loopback), none to skip it")
	fs.StringVar(&o.tcpCC, "tcp-cc", "", "TCP baseline's congestion control `algorithm` (e.g. reno, as soft uses between two ends on one host; default the system's)")
	fs.StringVar(&tests, "test", "stream,latency", "comma-separated `tests`: stream (bandwidth, client->server), latency (ping-pong round trip)")
	fs.StringVar(&sizes, "sizes", "", "comma-separated message `sizes`, 1 to 64M, e.g. 1,64,4K,64K,1M,4M,64M (default: 64K for stream, 64 for latency)")
	fs.BoolVar(&o.buffers, "buffers", false, "send and receive from rdma.Buffers (registered memory: the zero-copy paths), on both ends")
	fs.BoolVar(&o.memcpy, "memcpy", false, "also measure single-core memcpy bandwidth at each stream size (the reference line)")
	fs.IntVar(&o.rndv, "rndv", 0, "Config.RendezvousThreshold in `bytes` (0: the default; negative: never)")
	fs.IntVar(&o.parallel, "P", 1, "`connections` in parallel per test")
	fs.DurationVar(&o.duration, "t", 2*time.Second, "`duration` of each test (after the warm-up)")
	fs.Int64Var(&o.iterations, "n", 0, "messages per connection per test; overrides -t")
	fs.IntVar(&o.rounds, "rounds", 1, "repeat each test this many `times`, alternating rdma and TCP; the table shows medians")
	fs.DurationVar(&o.warmup, "warmup", 200*time.Millisecond, "untimed `duration` of traffic before each test is measured")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the results as JSON to this `file`")
	fs.BoolVar(&o.quiet, "q", false, "no progress lines on stderr")
	fs.StringVar(&ring, "ring", "", "rdma receive ring and send buffer `size` (rdma.Config.RingSize; default the library's)")
	fs.DurationVar(&o.pollTime, "poll", 0, "rdma busy-poll `time` before sleeping (rdma.Config.PollTime; 0: the provider's default, negative: none)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write this process's CPU profile to `file` (with -fork, the server's to file.server)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	modes := 0
	for _, m := range []bool{o.server, o.client != "", o.loopback} {
		if m {
			modes++
		}
	}
	if modes != 1 {
		return nil, errors.New("choose exactly one mode: -s (server), -c host:port (client) or -loopback")
	}
	if o.fork && !o.loopback {
		return nil, errors.New("-fork goes with -loopback")
	}
	if o.server && (o.json || o.jsonFile != "") {
		return nil, errors.New("-json and -json-file are for the client: the server has no report")
	}
	if o.child && !o.server {
		return nil, errors.New("-child is internal to -loopback -fork")
	}
	if o.loopback && !set["addr"] {
		o.addr = loopbackAddr
	}
	if o.client != "" {
		o.addr = o.client
	}
	if err := checkHostPort("address", o.addr); err != nil {
		return nil, err
	}
	if o.tcpAddr == "" {
		if o.loopback {
			o.tcpAddr = loopbackAddr
		} else {
			a, err := nextPort(o.addr)
			if err != nil {
				return nil, err
			}
			o.tcpAddr = a
		}
	} else if err := checkHostPort("-tcp-addr", o.tcpAddr); err != nil {
		return nil, err
	}
	switch o.provider {
	case "", "auto", "soft", "rdmacore":
	default:
		return nil, fmt.Errorf("-provider %q: want soft, rdmacore or auto", o.provider)
	}
	switch strings.ToLower(baseline) {
	case "":
		o.baseline = o.loopback
	case "tcp":
		o.baseline = true
	case "none", "off", "no":
		o.baseline = false
	default:
		return nil, fmt.Errorf("-baseline %q: want tcp or none", baseline)
	}
	var err error
	if o.tests, err = parseTests(tests); err != nil {
		return nil, err
	}
	if sizes != "" {
		if o.sizes, err = parseSizes(sizes); err != nil {
			return nil, err
		}
	}
	if ring != "" {
		if o.ringSize, err = parseSize(ring); err != nil {
			return nil, fmt.Errorf("-ring: %w", err)
		}
	}
	if o.parallel < 1 || o.parallel > maxParallel {
		return nil, fmt.Errorf("-P %d: want 1 to %d connections", o.parallel, maxParallel)
	}
	if o.iterations < 0 {
		return nil, fmt.Errorf("-n %d: want a positive message count (or 0 to run for -t)", o.iterations)
	}
	if o.iterations == 0 && o.duration <= 0 {
		return nil, fmt.Errorf("-t %v: want a positive duration (or -n)", o.duration)
	}
	if o.duration > maxTestDuration {
		return nil, fmt.Errorf("-t %v: longer than %v", o.duration, maxTestDuration)
	}
	if o.warmup < 0 {
		return nil, fmt.Errorf("-warmup %v: want zero or more", o.warmup)
	}
	if o.rounds < 1 || o.rounds > maxRounds {
		return nil, fmt.Errorf("-rounds %d: want 1 to %d", o.rounds, maxRounds)
	}
	return o, nil
}

func checkHostPort(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %v (want host:port, e.g. %s)", what, addr, err, defaultAddr)
	}
	if host == "" {
		return fmt.Errorf("%s %q: no host (want host:port, e.g. %s)", what, addr, defaultAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", what, addr, port)
	}
	return nil
}

// nextPort is addr with its port plus one: where a server listens for the
// TCP baseline unless told otherwise (its rdma port is taken: the soft
// provider carries rdma on TCP at that very ip:port).
func nextPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, _ := strconv.Atoi(port)
	switch {
	case p == 0:
		return net.JoinHostPort(host, "0"), nil
	case p == 65535:
		return "", fmt.Errorf("address %q: no port after %d for the TCP baseline; give -tcp-addr", addr, p)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

func parseTests(s string) ([]uint8, error) {
	var out []uint8
	seen := map[uint8]bool{}
	for _, f := range strings.Split(s, ",") {
		var k uint8
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "stream", "bw", "bandwidth":
			k = kindStream
		case "latency", "lat", "rtt":
			k = kindLatency
		default:
			return nil, fmt.Errorf("-test: unknown test %q (want stream, latency or both)", f)
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out, nil
}

// parseSizes reads a comma-separated list of sizes such as "1,64,4K,64K,1M,4M".
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := parseSize(f)
		if err != nil {
			return nil, fmt.Errorf("-sizes: %w", err)
		}
		if n < minMsgSize || n > maxMsgSize {
			return nil, fmt.Errorf("-sizes: %s is out of range: messages are 1 B to 64 MiB", strings.TrimSpace(f))
		}
		out = append(out, n)
	}
	return out, nil
}

// parseSize reads a byte count with an optional binary suffix: 4K, 64KiB,
// 1M, 2MB (all powers of 1024), or a plain number.
func parseSize(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, sfx := range []struct {
		s string
		m int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, sfx.s) {
			t, mult = strings.TrimSuffix(t, sfx.s), sfx.m
			break
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size (want a number with an optional K, M or G suffix)", strings.TrimSpace(s))
	}
	return n * mult, nil
}

// formatSize writes n compactly: 64, 4K, 64K, 1M, 1536.
func formatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}
