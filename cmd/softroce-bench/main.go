// Command softroce-bench measures rdma.Conn inside the Soft-RoCE VM with the
// same traffic patterns as rdma-core's reference tools, so that ratios taken
// in one guest run mean something (the guest is emulated: absolute figures
// do not). scripts/softroce-bench.sh runs it beside rstream, ib_send_bw and
// ib_send_lat.
//
//	softroce-bench -net rdma|tcp -test pingpong|stream -size N -count N [-procs 2]
//
// With -procs 2 the client runs in a child process (this program re-run),
// as rstream's and perftest's two ends do; by default both ends are
// goroutines of one process.
//
// pingpong is rstream's pattern: the client sends size bytes, the server
// reads them and sends size bytes back, count times. stream is ib_send_bw's:
// the client sends count messages of size bytes, the server reads them.
// The output line gives the time per transfer (a ping-pong's mean round
// trip) and, for pingpong, the median and 99th percentile round trip: in
// the emulated guest a run's first round trips and a few scheduling stalls
// weigh on the mean, so the percentiles say what a steady connection does.
// Addresses: $SOFTROCE_IP (the guest's RDMA address), never anything else.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rdmanet/rdma"
)

func main() {
	netw := flag.String("net", "rdma", "rdma (rdma.Conn over the rdmacore provider) or tcp (the kernel's TCP)")
	provider := flag.String("provider", "rdmacore", "provider for -net rdma")
	test := flag.String("test", "pingpong", "pingpong or stream")
	size := flag.Int("size", 64, "message size, bytes")
	count := flag.Int("count", 1000, "messages (pingpong: round trips)")
	pollTime := flag.Duration("polltime", 0, "rdma.Config.PollTime: busy-poll this long before sleeping")
	busyPoll := flag.Bool("busypoll", false, "rdma.Config.BusyPoll: poll without ever sleeping, as rstream does by default")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measured run to this file (with -procs 2, the client's to this file with .client appended)")
	procs := flag.Int("procs", 1, "1: server and client are goroutines of one process; 2: the client is a child process")
	dialAddr := flag.String("dial", "", "internal: be the client child of -procs 2, dialing this address")
	flag.BoolVar(&useBuffers, "buffers", false, "send and receive from rdma.Buffers (registered memory: the zero-copy paths), on both ends")
	flag.BoolVar(&showStats, "stats", false, "print how the client's Reads waited (rdma.Conn's Stats: at once, handed over, spun, slept)")
	flag.DurationVar(&markOver, "mark-over", 0, "pingpong: write a line to the kernel's trace marker (-mark-file) after each round trip slower than this (scripts/softroce-trace.sh)")
	flag.StringVar(&markFile, "mark-file", "/sys/kernel/tracing/trace_marker", "the trace marker -mark-over writes to")
	flag.Parse()
	if *cpuProfile != "" {
		name := *cpuProfile
		if *dialAddr != "" {
			name += ".client" // the -procs 2 child gets the same flags
		}
		f, err := os.Create(name)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	ip := os.Getenv("SOFTROCE_IP")
	if i := strings.IndexByte(ip, '/'); i >= 0 {
		ip = ip[:i]
	}
	if net.ParseIP(ip) == nil {
		fail(fmt.Errorf("SOFTROCE_IP %q is not set to an address: run inside the Soft-RoCE VM", ip))
	}
	ln, dial := transport(*netw, &rdma.Config{Provider: *provider, PollTime: *pollTime, BusyPoll: *busyPoll}, ip, *dialAddr == "")
	var secs float64
	var rtts []time.Duration
	var err error
	switch {
	case *dialAddr != "":
		secs, rtts, err = client(dial, *dialAddr, *test, *size, *count)
	case *procs == 2:
		secs, err = runChild(ln, *test, *size, *count)
		if err == nil {
			// The child printed the figures; the server's CPU time beside.
			fmt.Printf("server %9.3f s user CPU\n", userCPU()-serveCPU)
			return
		}
	default:
		secs, rtts, err = run(ln, dial, *test, *size, *count)
	}
	if err != nil {
		fail(err)
	}
	bytes := float64(*size) * float64(*count)
	if *test == "pingpong" {
		bytes *= 2
	}
	p50, p99 := percentile(rtts, 50), percentile(rtts, 99)
	fmt.Printf("%-6s %-9s %8d %7d %9.3fs %9.2f MB/s %10.2f us/xfer %9.2f us p50 %9.2f us p99 %9.3f s user CPU\n",
		*netw, *test, *size, *count, secs, bytes/secs/1e6, secs/float64(*count)*1e6, p50, p99, clientCPU)
}

// useBuffers: -buffers.
var useBuffers bool

// markOver and markFile: -mark-over, -mark-file.
var (
	markOver time.Duration
	markFile string
)

// The user CPU time of the measured transfers (the process's start and the
// connection's setup left out): the client's, and the server's own (in
// the parent process with -procs 2) from its accept on.
var clientCPU, serveCPU float64

// showStats: -stats.
var showStats bool

// message is a message buffer: an rdma.Buffer's memory with -buffers,
// else the Go heap.
func message(size int) []byte {
	if !useBuffers {
		return make([]byte, size)
	}
	b, err := rdma.AllocBuffer(size)
	if err != nil {
		fail(err)
	}
	return b.Bytes() // freed with the process
}

// userCPU is this process's user CPU time so far, in seconds.
func userCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6
}

// percentile is the p-th percentile of d in microseconds (0 for none); it
// sorts d.
func percentile(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[(len(d)-1)*p/100]) / 1e3
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "softroce-bench:", err)
	os.Exit(1)
}

func transport(netw string, cfg *rdma.Config, ip string, listen bool) (net.Listener, func(string) (net.Conn, error)) {
	addr := net.JoinHostPort(ip, "0")
	var ln net.Listener
	var err error
	switch netw {
	case "rdma":
		if listen {
			ln, err = (&rdma.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", addr)
			if err != nil {
				fail(err)
			}
		}
		d := &rdma.Dialer{Config: cfg, Timeout: 20 * time.Second}
		return ln, func(a string) (net.Conn, error) { return d.Dial("rdma", a) }
	case "tcp":
		if listen {
			ln, err = net.Listen("tcp", addr)
			if err != nil {
				fail(err)
			}
		}
		return ln, func(a string) (net.Conn, error) { return net.Dial("tcp", a) }
	}
	fail(fmt.Errorf("unknown -net %q", netw))
	return nil, nil
}

// run measures count transfers between a server goroutine and a client
// goroutine of this process.
func run(ln net.Listener, dial func(string) (net.Conn, error), test string, size, count int) (float64, []time.Duration, error) {
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() { srvErr <- serve(ln, test, size, count) }()
	secs, rtts, err := client(dial, ln.Addr().String(), test, size, count)
	if err != nil {
		return 0, nil, err
	}
	if err := <-srvErr; err != nil {
		return 0, nil, err
	}
	return secs, rtts, nil
}

// runChild serves one connection from a child process, this program re-run
// as the client, which measures and prints.
func runChild(ln net.Listener, test string, size, count int) (float64, error) {
	defer ln.Close()
	cmd := exec.Command(os.Args[0], append([]string{"-dial", ln.Addr().String()}, os.Args[1:]...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	srvErr := serve(ln, test, size, count)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("client process: %w", err)
	}
	return 0, srvErr
}

// serve accepts one connection and answers the client's pattern.
func serve(ln net.Listener, test string, size, count int) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := message(size)
	serveCPU = userCPU()
	for i := 0; i < count; i++ {
		if _, err := io.ReadFull(c, buf); err != nil {
			return fmt.Errorf("server read %d: %w", i, err)
		}
		if test == "pingpong" {
			if _, err := c.Write(buf); err != nil {
				return fmt.Errorf("server write %d: %w", i, err)
			}
		}
	}
	if test == "stream" {
		if _, err := c.Write(buf[:1]); err != nil {
			return err
		}
	}
	// Wait for the client to close, so that no transfer is cut short.
	_, _ = c.Read(buf[:1])
	return nil
}

// client dials addr and measures count transfers, and for pingpong each
// round trip.
func client(dial func(string) (net.Conn, error), addr, test string, size, count int) (float64, []time.Duration, error) {
	c, err := dial(addr)
	if err != nil {
		return 0, nil, fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	buf := message(size)
	for i := range buf {
		buf[i] = byte(i)
	}
	in := message(size)
	var rtts []time.Duration
	if test == "pingpong" {
		rtts = make([]time.Duration, count)
	}
	var marker *os.File
	if markOver > 0 && test == "pingpong" {
		if marker, err = os.OpenFile(markFile, os.O_WRONLY, 0); err != nil {
			return 0, nil, err
		}
		defer marker.Close()
	}
	cpu0 := userCPU()
	start := time.Now()
	last := start
	for i := 0; i < count; i++ {
		if _, err := c.Write(buf); err != nil {
			return 0, nil, fmt.Errorf("client write %d: %w", i, err)
		}
		if test == "pingpong" {
			if _, err := io.ReadFull(c, in); err != nil {
				return 0, nil, fmt.Errorf("client read %d: %w", i, err)
			}
			now := time.Now()
			rtts[i], last = now.Sub(last), now
			if marker != nil && rtts[i] > markOver {
				// After the round trip, so as not to slow it: the marker's
				// time is its end, the window reaches back rtts[i].
				fmt.Fprintf(marker, "slow round trip %d %d us\n", i, rtts[i].Microseconds())
			}
		}
	}
	if test == "stream" {
		if _, err := io.ReadFull(c, in[:1]); err != nil {
			return 0, nil, fmt.Errorf("client read ack: %w", err)
		}
	}
	secs := time.Since(start).Seconds()
	clientCPU = userCPU() - cpu0
	if showStats {
		if rc, ok := c.(*rdma.Conn); ok {
			st := rc.Stats()
			fmt.Fprintf(os.Stderr, "client waits: reads at once %d, handed %d, spun %d, slept %d; spins %d (caught %d), sleeps %d; writes waited for credit %d, ring %d, send buffer %d (%v); ring %d, peer's %d, send buffer %d\n",
				st.ReadsAtOnce, st.ReadsHanded, st.ReadsSpun, st.ReadsSlept, st.Spins, st.SpinsCaught, st.Sleeps,
				st.CreditWaits, st.RingWaits, st.SendBufferWaits, st.WriteWaitTime, st.RingSize, st.PeerRingSize, st.SendBufferSize)
		}
	}
	return secs, rtts, nil
}
