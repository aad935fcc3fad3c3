// Command softroce-bench measures rdma.Conn inside the Soft-RoCE VM with the
// same traffic patterns as rdma-core's reference tools, so that ratios taken
// in one guest run mean something (the guest is emulated: absolute figures
// do not). scripts/softroce-bench.sh runs it beside rstream, ib_send_bw and
// ib_send_lat.
//
//	softroce-bench -net rdma|tcp -test pingpong|stream -size N -count N
//
// pingpong is rstream's pattern: the client sends size bytes, the server
// reads them and sends size bytes back, count times. stream is ib_send_bw's:
// the client sends count messages of size bytes, the server reads them.
// Addresses: $SOFTROCE_IP (the guest's RDMA address), never anything else.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strings"
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
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measured run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
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
	ln, dial := transport(*netw, &rdma.Config{Provider: *provider, PollTime: *pollTime}, ip)
	secs, err := run(ln, dial, *test, *size, *count)
	if err != nil {
		fail(err)
	}
	bytes := float64(*size) * float64(*count)
	if *test == "pingpong" {
		bytes *= 2
	}
	fmt.Printf("%-6s %-9s %8d %7d %9.3fs %9.2f MB/s %10.2f us/xfer\n",
		*netw, *test, *size, *count, secs, bytes/secs/1e6, secs/float64(*count)*1e6)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "softroce-bench:", err)
	os.Exit(1)
}

func transport(netw string, cfg *rdma.Config, ip string) (net.Listener, func(string) (net.Conn, error)) {
	addr := net.JoinHostPort(ip, "0")
	switch netw {
	case "rdma":
		ln, err := (&rdma.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", addr)
		if err != nil {
			fail(err)
		}
		d := &rdma.Dialer{Config: cfg, Timeout: 20 * time.Second}
		return ln, func(a string) (net.Conn, error) { return d.Dial("rdma", a) }
	case "tcp":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fail(err)
		}
		return ln, func(a string) (net.Conn, error) { return net.Dial("tcp", a) }
	}
	fail(fmt.Errorf("unknown -net %q", netw))
	return nil, nil
}

func run(ln net.Listener, dial func(string) (net.Conn, error), test string, size, count int) (float64, error) {
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for i := 0; i < count; i++ {
			if _, err := io.ReadFull(c, buf); err != nil {
				srvErr <- fmt.Errorf("server read %d: %w", i, err)
				return
			}
			if test == "pingpong" {
				if _, err := c.Write(buf); err != nil {
					srvErr <- fmt.Errorf("server write %d: %w", i, err)
					return
				}
			}
		}
		if test == "stream" {
			// One byte back says everything arrived.
			if _, err := c.Write(buf[:1]); err != nil {
				srvErr <- err
				return
			}
		}
		srvErr <- nil
	}()
	c, err := dial(ln.Addr().String())
	if err != nil {
		return 0, fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	in := make([]byte, size)
	start := time.Now()
	for i := 0; i < count; i++ {
		if _, err := c.Write(buf); err != nil {
			return 0, fmt.Errorf("client write %d: %w", i, err)
		}
		if test == "pingpong" {
			if _, err := io.ReadFull(c, in); err != nil {
				return 0, fmt.Errorf("client read %d: %w", i, err)
			}
		}
	}
	if test == "stream" {
		if _, err := io.ReadFull(c, in[:1]); err != nil {
			return 0, fmt.Errorf("client read ack: %w", err)
		}
	}
	secs := time.Since(start).Seconds()
	if err := <-srvErr; err != nil {
		return 0, err
	}
	return secs, nil
}
