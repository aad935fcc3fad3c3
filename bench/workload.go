package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// scale sizes a run: how long each measurement lasts, how many keys, how
// many raft entries.
type scale struct {
	dur         time.Duration // a workload's measured time
	warm        time.Duration // run before it, unmeasured
	keys        int           // redis keys per worker
	raftEntries int           // entries a raft measurement applies
	raftTimeout time.Duration // raft's heartbeat and election timeouts; 0: raft's defaults
	raftIdle    time.Duration // the cluster idles this long before its leader is killed
}

// workload is one application's client: prepare connects to the server at
// addr (and fills what it reads), then the measure's workers run.
type workload struct {
	name    string
	service string // the server process's service ("redis", "http", ...)
	prepare func(ctx context.Context, sc scale, t *transport, addr string) (*measure, error)
}

// measure is a prepared workload: workers goroutines each call run, which
// works until until and returns its operations and their latencies.
type measure struct {
	workers int
	// paced: each worker waits between operations (a pace), so that the
	// throughput is the pace's on any transport and only the latency
	// tells them apart: its ratio is by p50 (Result.RatioBy).
	paced bool
	run   func(ctx context.Context, w int, until time.Time, lat []time.Duration) (int64, []time.Duration, error)
	close func() error
}

// sample is one measurement of one workload on one transport.
type sample struct {
	ops     int64
	elapsed time.Duration
	cpu     cpuTime // both processes' (raft: all three)
	p50     time.Duration
	p99     time.Duration
	paths   string // the rdma connections' paths at the end (client side)
	paced   bool   // the measure's
}

// runMeasure runs m: warm first, then dur measured, with the CPU time of
// this process and of the server (srvCPU) around the measured part.
func runMeasure(ctx context.Context, m *measure, sc scale, srvCPU func() (cpuTime, error)) (sample, error) {
	s := sample{paced: m.paced}
	if sc.warm > 0 {
		if _, err := runWorkers(ctx, m, time.Now().Add(sc.warm), nil); err != nil {
			return s, fmt.Errorf("warm-up: %w", err)
		}
	}
	s0, err := srvCPU()
	if err != nil {
		return s, err
	}
	c0 := processCPU()
	start := time.Now()
	var lat latencies
	ops, err := runWorkers(ctx, m, start.Add(sc.dur), &lat)
	s.elapsed = time.Since(start)
	c1 := processCPU()
	if err != nil {
		return s, err
	}
	s1, err := srvCPU()
	if err != nil {
		return s, err
	}
	if ops == 0 {
		return s, errors.New("no operation completed")
	}
	s.ops = ops
	s.cpu = c1.minus(c0).plus(s1.minus(s0))
	s.p50, s.p99 = lat.quantiles()
	return s, nil
}

// runWorkers runs m's workers until until; the first error ends the run.
func runWorkers(ctx context.Context, m *measure, until time.Time, lat *latencies) (int64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	var errs []error
	for w := range m.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]time.Duration, 0, 1024)
			n, d, err := m.run(ctx, w, until, buf)
			if lat != nil {
				lat.add(d)
			}
			mu.Lock()
			total += n
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %d: %w", w, err))
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, errors.Join(errs...)
}

// stamp writes worker w's op number into msg's first 16 bytes.
func stamp(msg []byte, w int, op int64) {
	binary.LittleEndian.PutUint64(msg, uint64(w))
	binary.LittleEndian.PutUint64(msg[8:], uint64(op))
}

// echoLoop is worker w's round trips until until: each stamps msg with
// its op number, then roundTrip sends msg and returns the answer, which
// must equal it (else an error naming what, the answer). It returns the
// round trips done and lat with their latencies appended.
func echoLoop(w int, msg []byte, until time.Time, lat []time.Duration, what string, roundTrip func() ([]byte, error)) (int64, []time.Duration, error) {
	var ops int64
	for time.Now().Before(until) {
		stamp(msg, w, ops)
		start := time.Now()
		got, err := roundTrip()
		if err != nil {
			return ops, lat, err
		}
		if !bytes.Equal(got, msg) {
			return ops, lat, errors.New(what + " differs from the message")
		}
		lat = append(lat, time.Since(start))
		ops++
	}
	return ops, lat, nil
}

// workloads are the bench's client workloads, raft's aside (raft.go).
func workloads() []workload {
	return []workload{
		redisWorkload("redis-set-p100-c4", "set", 100, 4),
		redisWorkload("redis-get-p100-c4", "get", 100, 4),
		redisWorkload("redis-set-c4", "set", 1, 4),
		redisWorkload("redis-get-c4", "get", 1, 4),
		redisWorkload("redis-get-c64", "get", 1, 64),
		// One GET every 5 ms on one connection: some 35 KB a second, a
		// connection that never reaches 64 KiB in a measurement.
		pacedRedisWorkload("redis-get-quiet", "get", 1, 1, 5*time.Millisecond),
		httpWorkload("http-1KiB-c8", 1<<10, 8),
		httpWorkload("http-1KiB-c64", 1<<10, 64),
		httpWorkload("http-1MiB-c8", 1<<20, 8),
		grpcUnaryWorkload("grpc-unary-r64", 256, 64),
		grpcStreamWorkload("grpc-stream-s64", 256, 64),
		yamuxWorkload("yamux-s64", 1<<10, 64),
	}
}
