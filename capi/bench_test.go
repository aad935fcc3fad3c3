package capi

import (
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const benchMsg = 64

// BenchmarkRoundTrip64 times one 64-byte message there and back, echoed by
// a server goroutine, through each layer in one run: the bare conns (TCP and
// the default transport), capi over each, and librdma.so from C (a separate
// program, given by CAPI_BENCH_C; make bench-capi builds and passes it).
// The C figure minus capi's is the cost of the C boundary; the C program
// also times a call that crosses the boundary and does no I/O (ns/C-call),
// and capi-rdma-locked is capi with both goroutines locked to their threads,
// as a C thread's calls are.
func BenchmarkRoundTrip64(b *testing.B) {
	for _, tr := range transports() {
		b.Run("conn-"+tr.name, func(b *testing.B) { benchConn(b, tr) })
	}
	for _, tr := range transports() {
		b.Run("capi-"+tr.name, func(b *testing.B) { benchCapi(b, tr, false) })
	}
	// As above with both goroutines locked to their OS threads, as a C
	// thread's call into librdma is: this isolates what thread locking
	// costs from what the cgo transitions cost.
	b.Run("capi-"+defaultTransport.name+"-locked", func(b *testing.B) { benchCapi(b, defaultTransport, true) })
	b.Run("librdma-C", benchC)
}

func benchConn(b *testing.B, tr transport) {
	ln, err := tr.listen("127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, benchMsg)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := tr.dial(b.Context(), net.ParseIP("127.0.0.2"), ln.Addr().String(), 0)
	require.NoError(b, err)
	out, in := make([]byte, benchMsg), make([]byte, benchMsg)
	b.ReportAllocs()
	b.SetBytes(2 * benchMsg)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, in); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close()
	<-done
}

func benchCapi(b *testing.B, tr transport, locked bool) {
	srv, err := initWith(tr, "127.0.0.1", 0, BufferSize, true)
	require.NoError(b, err)
	defer srv.Close()
	cl, err := initWith(tr, "127.0.0.2", 0, BufferSize, false)
	require.NoError(b, err)
	defer cl.Close()
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	p, _ := strconv.Atoi(port)
	_, err = cl.ConnectPeer("127.0.0.1", p)
	require.NoError(b, err)
	_, err = srv.AcceptPeer()
	require.NoError(b, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if locked {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		buf := make([]byte, BufferSize)
		for {
			n, err := srv.Recv(0, buf)
			if err != nil {
				return
			}
			if _, err := srv.Send(0, buf[:n]); err != nil {
				return
			}
		}
	}()
	if locked {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	out, in := make([]byte, benchMsg), make([]byte, BufferSize)
	b.ReportAllocs()
	b.SetBytes(2 * benchMsg)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cl.Send(0, out); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Recv(0, in); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cl.Close()
	<-done
}

// benchC runs the C benchmark program for b.N round trips and reports the
// time it measured itself (so process start-up is not counted).
func benchC(b *testing.B) {
	prog := os.Getenv("CAPI_BENCH_C")
	if prog == "" {
		b.Skip("CAPI_BENCH_C is not set: run make bench-capi")
	}
	out, err := exec.Command(prog, strconv.Itoa(b.N), strconv.Itoa(benchMsg)).CombinedOutput()
	require.NoError(b, err, "%s", out)
	f := strings.Fields(string(out))
	require.Len(b, f, 4, "%s", out)
	ns, err := strconv.ParseFloat(f[1], 64)
	require.NoError(b, err)
	call, err := strconv.ParseFloat(f[3], 64)
	require.NoError(b, err)
	b.SetBytes(2 * benchMsg)
	b.ReportMetric(ns, "ns/op")
	// A round trip is four calls into librdma (send and recv on each
	// side): this says how much of ns/op the boundary itself is.
	b.ReportMetric(call, "ns/C-call")
}
