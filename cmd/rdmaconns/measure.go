package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/phase"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// result is one path's figures.
type result struct {
	Path      string  `json:"path"`
	Conns     int     `json:"conns"`
	SetupMean float64 `json:"setup_mean_us"` // dial to first echo, per conn
	SetupP50  float64 `json:"setup_p50_us"`
	SetupP99  float64 `json:"setup_p99_us"`
	DialMean  float64 `json:"dial_mean_us"` // of which Dial returning
	// The process's CPU time (user and system, both ends) per conn while
	// they were set up: on a host with few cores, setup is bound by it.
	CPUPerConn  float64 `json:"cpu_per_conn_us"`
	RSSPerEP    float64 `json:"rss_per_endpoint_bytes"`
	RegPerEP    float64 `json:"registered_per_endpoint_bytes"`
	FDsPerEP    float64 `json:"fds_per_endpoint"`
	GoroutPerEP float64 `json:"goroutines_per_endpoint"`
	// Where the resident memory is, per endpoint: the Go heap in use,
	// goroutine stacks, shared memory (the soft provider's rings).
	HeapPerEP  float64 `json:"heap_per_endpoint_bytes"`
	StackPerEP float64 `json:"stack_per_endpoint_bytes"`
	ShmemPerEP float64 `json:"shmem_per_endpoint_bytes"`
	// With -phases: the setup's steps, mean time from the dial's start,
	// and the page faults per connection and the goroutines started per
	// connection while they were set up (fresh memory and goroutine
	// hand-offs are a good part of a setup's cost).
	Phases            []phaseStep `json:"phases,omitempty"`
	FaultsPerConn     float64     `json:"faults_per_conn,omitempty"`
	GoroutinesPerConn float64     `json:"goroutines_per_conn,omitempty"`
	// What the rdma endpoints' own statistics (rdma.OpenConnStats) say
	// while held: how many each path carries (rdmacore, soft-shm,
	// soft-tcp), their ring and send buffer bytes, messages, and how
	// many failed. Absent for net.
	Stats *heldStats `json:"stats,omitempty"`
}

// heldStats sums rdma.OpenConnStats over the endpoints held.
type heldStats struct {
	Endpoints       int            `json:"endpoints"`
	Paths           map[string]int `json:"paths"`
	BuffersPerEP    float64        `json:"ring_and_send_buffer_per_endpoint_bytes"`
	MessagesPerEP   float64        `json:"messages_per_endpoint"` // data writes sent and received
	SleepsPerEP     float64        `json:"sleeps_per_endpoint"`   // sleeps on the completion channel
	KeepAlivesPerEP float64        `json:"keepalives_per_endpoint"`
	Failed          int            `json:"failed"`
}

// takeStats sums the statistics of every open rdma conn of the process.
func takeStats() *heldStats {
	all := rdma.OpenConnStats()
	if len(all) == 0 {
		return nil
	}
	h := &heldStats{Endpoints: len(all), Paths: map[string]int{}}
	var bufs, msgs, sleeps, kas uint64
	for _, s := range all {
		h.Paths[s.Path]++
		bufs += uint64(s.RingSize + s.SendBufferSize)
		msgs += s.MessagesSent + s.MessagesReceived
		sleeps += s.Sleeps
		kas += s.KeepAlives
		if s.Err != "" {
			h.Failed++
		}
	}
	n := float64(len(all))
	h.BuffersPerEP, h.MessagesPerEP = float64(bufs)/n, float64(msgs)/n
	h.SleepsPerEP, h.KeepAlivesPerEP = float64(sleeps)/n, float64(kas)/n
	return h
}

// snapshot is the process-wide state compared before and after.
type snapshot struct {
	rss, reg, shmem int64
	heap, stack     int64
	fds, gorou      int
}

func take() (snapshot, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var s snapshot
	var err error
	if s.rss, err = statusBytes("VmRSS:"); err != nil {
		return s, err
	}
	if s.shmem, err = statusBytes("RssShmem:"); err != nil {
		return s, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap, s.stack = int64(ms.HeapInuse), int64(ms.StackInuse)
	if s.fds, err = openFDs(); err != nil {
		return s, err
	}
	s.reg = verbs.MemoryInUse()
	s.gorou = runtime.NumGoroutine()
	return s, nil
}

// statusBytes reads a size field of /proc/self/status.
func statusBytes(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte(field)); ok {
			f := bytes.Fields(v)
			if len(f) == 2 {
				kb, err := strconv.ParseInt(string(f[0]), 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

func openFDs() (int, error) {
	d, err := os.ReadDir("/proc/self/fd")
	return len(d), err
}

// raiseFDLimit raises the soft descriptor limit toward want, up to the hard
// limit.
func raiseFDLimit(want int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	// Rlimit's fields are uint64 on Linux, int64 on FreeBSD: compared as
	// uint64, a negative (unlimited) value counts as the largest.
	if uint64(lim.Cur) >= uint64(want) {
		return nil
	}
	setLimit(&lim.Cur, min(uint64(want), uint64(lim.Max)))
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// setLimit stores v in an Rlimit field of either signedness.
func setLimit[T int64 | uint64](field *T, v uint64) { *field = T(v) }

// endpoints opens and closes one path's connections.
type endpoints struct {
	listen func() (net.Listener, error)
	dial   func(addr string) (net.Conn, error)
	done   func()
}

func pathEndpoints(path, ip string, ring int) endpoints {
	if path == "net" {
		return endpoints{
			listen: func() (net.Listener, error) { return net.Listen("tcp", net.JoinHostPort(ip, "0")) },
			dial:   func(a string) (net.Conn, error) { return net.Dial("tcp", a) },
			done:   func() {},
		}
	}
	cfg := &rdma.Config{Provider: "soft", RingSize: ring}
	done := func() {}
	switch path {
	case "rdmacore":
		cfg.Provider = "rdmacore"
		cfg.RDMAOnly = true
	case "shm":
		// Connections that only echo a byte would stay on TCP (a
		// connection moves to shared memory once it talks): move them at
		// once, so that the row measures connections on shared memory.
		prev, prevAfter := soft.SetSharedMemory(true), soft.SetSharedMemorySwitch(0)
		done = func() { soft.SetSharedMemory(prev); soft.SetSharedMemorySwitch(prevAfter) }
	case "tcp":
		prev := soft.SetSharedMemory(false)
		done = func() { soft.SetSharedMemory(prev) }
	}
	d := &rdma.Dialer{Config: cfg}
	lc := &rdma.ListenConfig{Config: cfg}
	return endpoints{
		listen: func() (net.Listener, error) {
			return lc.Listen(context.Background(), "rdma", net.JoinHostPort(ip, "0"))
		},
		dial: func(a string) (net.Conn, error) { return d.Dial("rdma", a) },
		done: done,
	}
}

// measure opens o.n connections on path, each echoing one byte, holds
// them, measures, then closes them all and checks that every descriptor
// came back.
func measure(ctx context.Context, path string, o *options) (result, error) {
	r := result{Path: path, Conns: o.n}
	ep := pathEndpoints(path, o.addr, o.ring)
	defer ep.done()
	ln, err := ep.listen()
	if err != nil {
		return r, err
	}
	var wg sync.WaitGroup
	served := make(chan error, 1)
	var srvConns []net.Conn
	var srvMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					select {
					case served <- err:
					default:
					}
				}
				return
			}
			srvMu.Lock()
			srvConns = append(srvConns, c)
			srvMu.Unlock()
			wg.Add(1)
			go func() { // echo one byte, then wait for the end like a server
				defer wg.Done()
				phase.Mark("server: accepted")
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err == nil {
					phase.Mark("server: byte read")
					if _, err := c.Write(b[:]); err == nil {
						_, _ = c.Read(b[:])
					}
				}
			}()
		}
	}()
	conns := make([]net.Conn, 0, o.n)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
		ln.Close()
		srvMu.Lock()
		for _, c := range srvConns {
			c.Close()
		}
		srvMu.Unlock()
		wg.Wait()
	}
	// One connection opened and closed first, so that what the provider
	// opens once per process (a device, its event channels) is in the
	// baseline and not counted against the connections.
	addr := ln.Addr().String()
	if c, err := ep.dial(addr); err != nil {
		closeAll()
		return r, err
	} else {
		c.Close()
	}
	before, err := take()
	if err != nil {
		closeAll()
		return r, err
	}
	setup := make([]time.Duration, 0, o.n)
	var dialSum time.Duration
	var clock *phaseClock
	if o.phases {
		clock = newPhaseClock()
		clock.start()
		defer clock.stop()
		clock.faults0 = minorFaults()
		clock.started0 = goroutinesStarted()
	}
	cpu0 := cpuTime()
	for i := 0; i < o.n; i++ {
		if err := ctx.Err(); err != nil {
			closeAll()
			return r, err
		}
		if clock != nil {
			clock.begin()
		}
		t0 := time.Now()
		c, err := ep.dial(addr)
		if err != nil {
			closeAll()
			return r, fmt.Errorf("conn %d: %w", i, err)
		}
		dialSum += time.Since(t0)
		phase.Mark("client: dial returned")
		conns = append(conns, c)
		b := [1]byte{byte(i)}
		_, err = c.Write(b[:])
		if err == nil {
			phase.Mark("client: byte written")
			_, err = io.ReadFull(c, b[:])
			phase.Mark("client: echo read")
		}
		if err != nil || b[0] != byte(i) {
			closeAll()
			return r, fmt.Errorf("conn %d: echo: %v (got %d)", i, err, b[0])
		}
		setup = append(setup, time.Since(t0))
	}
	r.CPUPerConn = float64(cpuTime()-cpu0) / 1e3 / float64(o.n)
	if clock != nil {
		clock.stop()
		r.Phases = clock.steps()
		r.FaultsPerConn = float64(minorFaults()-clock.faults0) / float64(o.n)
		r.GoroutinesPerConn = float64(goroutinesStarted()-clock.started0) / float64(o.n)
	}
	held, err := take()
	r.Stats = takeStats()
	if err == nil && o.memProfile != "" {
		err = writeHeapProfile(o.memProfile + "." + path)
	}
	closeAll()
	if err != nil {
		return r, err
	}
	select {
	case err := <-served:
		return r, fmt.Errorf("accept: %w", err)
	default:
	}
	eps := float64(2 * o.n)
	r.RSSPerEP = float64(held.rss-before.rss) / eps
	r.RegPerEP = float64(held.reg-before.reg) / eps
	r.FDsPerEP = float64(held.fds-before.fds) / eps
	r.GoroutPerEP = float64(held.gorou-before.gorou) / eps
	r.HeapPerEP = float64(held.heap-before.heap) / eps
	r.StackPerEP = float64(held.stack-before.stack) / eps
	r.ShmemPerEP = float64(held.shmem-before.shmem) / eps
	var sum time.Duration
	for _, d := range setup {
		sum += d
	}
	slices.Sort(setup)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	r.SetupMean = us(sum / time.Duration(len(setup)))
	r.SetupP50 = us(setup[len(setup)/2])
	r.SetupP99 = us(setup[len(setup)*99/100])
	r.DialMean = us(dialSum / time.Duration(len(setup)))
	// Everything closed: the descriptors must all be back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err := openFDs()
		if err != nil {
			return r, err
		}
		if after <= before.fds {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d descriptors still open after closing every connection", after-before.fds)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r, nil
}

func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.WriteHeapProfile(f)
}
