package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma"
)

// transport is one way of reaching the server: rdma, or TCP for the
// baseline. Both run the very same test code over a net.Conn.
type transport struct {
	name string // "rdma" or "tcp"
	addr string
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

const dialTimeout = 10 * time.Second

func rdmaTransport(o *options, addr string) transport {
	d := &rdma.Dialer{Timeout: dialTimeout, Config: o.rdmaConfig()}
	name := "rdma"
	if o.buffers {
		name = "rdma-buffers" // a series of its own beside a copying run's
	}
	return transport{name: name, addr: addr, dial: func(ctx context.Context, a string) (net.Conn, error) {
		return d.DialContext(ctx, "rdma", a)
	}}
}

func tcpTransport(addr, cc string) transport {
	d := &net.Dialer{Timeout: dialTimeout, Control: congestionControl(cc)}
	return transport{name: "tcp", addr: addr, dial: func(ctx context.Context, a string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a)
	}}
}

// testSpec is one measured run: a test kind and size over a transport,
// on o.parallel connections.
type testSpec struct {
	kind       uint8
	size       int
	parallel   int
	duration   time.Duration // measured time; ignored when iterations > 0
	iterations int64         // messages per connection; 0: run for duration
	warmup     time.Duration
	buffers    bool // from and into rdma.Buffers
}

// worker is what one connection measured.
type worker struct {
	start, end time.Time
	bytes      int64
	msgs       int64
	warmMsgs   int64 // messages sent in the warm-up
	hist       *hist // latency only
	server     serverResult
	err        error
}

// connStats sums the statistics of the rdma conns among cs over msgs
// messages of a test; nil if none is an rdma conn.
func connStats(cs []net.Conn, msgs int64) *connFigures {
	var s rdma.ConnStats
	n := 0
	for _, c := range cs {
		sc, ok := c.(interface{ Stats() rdma.ConnStats })
		if !ok {
			continue
		}
		x := sc.Stats()
		n++
		s.Path = x.Path
		s.CreditWaits += x.CreditWaits + x.RingWaits + x.SendBufferWaits
		s.WriteWaitTime += x.WriteWaitTime
		s.Sleeps += x.Sleeps
		s.Spins += x.Spins
		s.SpinsCaught += x.SpinsCaught
		s.SpinsRefused += x.SpinsRefused
		s.MessagesSent += x.MessagesSent + x.MessagesReceived
		s.RendezvousSent += x.RendezvousSent + x.RendezvousReceived
		s.ReadsAtOnce += x.ReadsAtOnce
		s.ReadsHanded += x.ReadsHanded
		s.ReadsSpun += x.ReadsSpun
		s.ReadsSlept += x.ReadsSlept
		s.Reads += x.Reads
		s.RingGrowths += x.RingGrowths + x.SendBufferGrowths
	}
	if n == 0 || msgs <= 0 {
		return nil
	}
	per := func(v uint64) float64 { return float64(v) / float64(msgs) }
	share := func(v, of uint64) float64 {
		if of == 0 {
			return 0
		}
		return float64(v) / float64(of)
	}
	return &connFigures{
		Path:              s.Path,
		WriteWaitsPerMsg:  per(s.CreditWaits),
		WriteWaitNsPerMsg: float64(s.WriteWaitTime.Nanoseconds()) / float64(msgs),
		SleepsPerMsg:      per(s.Sleeps),
		SpinsPerMsg:       per(s.Spins),
		SpinsCaughtShare:  share(s.SpinsCaught, s.Spins),
		RefusedPerMsg:     per(s.SpinsRefused),
		WireMsgsPerMsg:    per(s.MessagesSent),
		RndvPerMsg:        per(s.RendezvousSent),
		ReadsAtOnce:       share(s.ReadsAtOnce, s.Reads),
		ReadsHanded:       share(s.ReadsHanded, s.Reads),
		ReadsSpun:         share(s.ReadsSpun, s.Reads),
		ReadsSlept:        share(s.ReadsSlept, s.Reads),
		RingGrowths:       s.RingGrowths,
	}
}

// runTest runs spec over tr and returns its figures and the provider that
// carried it ("" for TCP).
func runTest(ctx context.Context, tr transport, spec testSpec) (measure, string, error) {
	conns := make([]net.Conn, 0, spec.parallel)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	h := header{Kind: spec.kind, Size: spec.size, Iters: spec.iterations, Buffers: spec.buffers}
	if spec.iterations == 0 {
		h.Duration = spec.warmup + spec.duration
	}
	var hb [headerLen]byte
	h.marshal(&hb)
	provider := ""
	for range spec.parallel {
		c, err := tr.dial(ctx, tr.addr)
		if err != nil {
			return measure{}, "", fmt.Errorf("%s: %w", tr.name, err)
		}
		conns = append(conns, c)
		if rc, ok := c.(*rdma.Conn); ok {
			provider = rc.Provider()
		}
		c.SetDeadline(time.Now().Add(headerTimeout))
		if _, err := c.Write(hb[:]); err != nil {
			return measure{}, "", fmt.Errorf("%s %s: sending the control header: %w", tr.name, tr.addr, err)
		}
		if err := readReply(c); err != nil {
			return measure{}, "", fmt.Errorf("%s %s: %w", tr.name, tr.addr, err)
		}
		c.SetDeadline(time.Time{})
	}

	var stop atomic.Bool
	warmEnd := time.Now().Add(spec.warmup)
	if spec.iterations == 0 {
		t := time.AfterFunc(spec.warmup+spec.duration, func() { stop.Store(true) })
		defer t.Stop()
	}
	// A cancelled run stops the loops and unblocks any Read or Write.
	ctxDone := context.AfterFunc(ctx, func() {
		stop.Store(true)
		for _, c := range conns {
			c.SetDeadline(time.Now())
		}
	})
	defer ctxDone()

	ws := make([]worker, spec.parallel)
	t0, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch spec.kind {
			case kindStream:
				ws[i] = streamWorker(c, spec.size, spec.buffers, warmEnd, spec.iterations, &stop)
			default:
				ws[i] = latencyWorker(c, spec.size, spec.buffers, warmEnd, spec.iterations, &stop)
			}
		}()
	}
	wg.Wait()
	cpu := processCPU() - cpu0
	wall := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return measure{}, provider, err
	}
	for i := range ws {
		if ws[i].err != nil {
			return measure{}, provider, fmt.Errorf("%s %s conn %d: %w", tr.name, kindName(spec.kind), i, ws[i].err)
		}
	}
	m := aggregate(ws, spec.size)
	m.ClientCPU = cpuShare(cpu, wall)
	var total int64
	for i := range ws {
		total += ws[i].warmMsgs + ws[i].msgs
	}
	if total > 0 {
		m.ClientCPUPerMsgNs = int64(cpu) / total
	}
	m.Conn = connStats(conns, total)
	return m, provider, nil
}

// aggregate sums the connections' counts over the wall time from the first
// one's start to the last one's end. size is the message size.
func aggregate(ws []worker, size int) measure {
	var m measure
	var serverCPU time.Duration
	var serverMsgs int64
	var first, last time.Time
	var h *hist
	for i := range ws {
		w := &ws[i]
		m.Bytes += w.bytes
		m.Messages += w.msgs
		if first.IsZero() || w.start.Before(first) {
			first = w.start
		}
		if w.end.After(last) {
			last = w.end
		}
		// Every connection sees the whole server process: take the largest.
		m.ServerCPU = max(m.ServerCPU, cpuShare(w.server.CPU, w.server.Elapsed))
		serverCPU = max(serverCPU, w.server.CPU)
		if size > 0 {
			serverMsgs += w.server.Bytes / int64(size)
		}
		if w.hist != nil {
			if h == nil {
				h = newHist()
			}
			h.merge(w.hist)
		}
	}
	if d := last.Sub(first); d > 0 {
		m.Seconds = d.Seconds()
		m.BytesPerSec = float64(m.Bytes) / m.Seconds
		m.MsgsPerSec = float64(m.Messages) / m.Seconds
	}
	if serverMsgs > 0 {
		m.ServerCPUPerMsgNs = int64(serverCPU) / serverMsgs
	}
	if h != nil {
		m.MinNs, m.MeanNs, m.MaxNs = h.minimum(), h.mean(), h.max
		m.P50Ns, m.P99Ns, m.P999Ns = h.quantile(0.50), h.quantile(0.99), h.quantile(0.999)
	}
	return m
}

type closeWriter interface{ CloseWrite() error }

// streamWorker writes size-byte messages until stop (or iters of them),
// half-closes, and waits for the server's count: the clock stops when the
// server has received everything, so bytes still buffered are not counted
// as delivered.
func streamWorker(c net.Conn, size int, buffers bool, warmEnd time.Time, iters int64, stop *atomic.Bool) (w worker) {
	buf, free, err := message(size, buffers)
	if err != nil {
		w.err = err
		return w
	}
	defer free()
	for i := range buf {
		buf[i] = byte(i)
	}
	var warm int64
	for time.Now().Before(warmEnd) && !stop.Load() {
		n, err := c.Write(buf)
		warm += int64(n)
		if err != nil {
			w.err = err
			return w
		}
	}
	w.start = time.Now()
	w.warmMsgs = warm / int64(size)
	for !stop.Load() && (iters == 0 || w.msgs < iters) {
		n, err := c.Write(buf)
		w.bytes += int64(n)
		if err != nil {
			w.err = err
			return w
		}
		w.msgs++
	}
	cw, ok := c.(closeWriter)
	if !ok {
		w.err = errors.New("the connection cannot half-close")
		return w
	}
	if err := cw.CloseWrite(); err != nil {
		w.err = err
		return w
	}
	w.server, w.err = readResult(c, warm+w.bytes)
	w.end = time.Now()
	return w
}

// readResult reads the server's count after the client's CloseWrite and
// checks it against what the client sent; then the server closes.
func readResult(c net.Conn, sent int64) (serverResult, error) {
	var rb [resultLen]byte
	if _, err := io.ReadFull(c, rb[:]); err != nil {
		return serverResult{}, fmt.Errorf("reading the server's count: %w", err)
	}
	res := parseServerResult(&rb)
	if res.Bytes != sent {
		return res, fmt.Errorf("the server received %d bytes, the client sent %d", res.Bytes, sent)
	}
	if n, err := c.Read(rb[:]); n != 0 || err != io.EOF {
		return res, fmt.Errorf("after the server's count: read %d bytes, %v; want EOF", n, err)
	}
	return res, nil
}

// latencyWorker ping-pongs size-byte messages until stop (or iters of them)
// and records every round trip in a histogram. The loop allocates nothing.
func latencyWorker(c net.Conn, size int, buffers bool, warmEnd time.Time, iters int64, stop *atomic.Bool) (w worker) {
	out, freeOut, err := message(size, buffers)
	if err != nil {
		w.err = err
		return w
	}
	defer freeOut()
	in, freeIn, err := message(size, buffers)
	if err != nil {
		w.err = err
		return w
	}
	defer freeIn()
	for i := range out {
		out[i] = byte(i)
	}
	w.hist = newHist()
	var warm int64
	for time.Now().Before(warmEnd) && !stop.Load() {
		if w.err = roundTrip(c, out, in); w.err != nil {
			return w
		}
		warm++
	}
	w.start = time.Now()
	w.warmMsgs = warm
	for !stop.Load() && (iters == 0 || w.msgs < iters) {
		t0 := time.Now()
		if w.err = roundTrip(c, out, in); w.err != nil {
			return w
		}
		w.hist.record(time.Since(t0))
		w.msgs++
	}
	w.end = time.Now()
	w.bytes = w.msgs * int64(size)
	cw, ok := c.(closeWriter)
	if !ok {
		w.err = errors.New("the connection cannot half-close")
		return w
	}
	if w.err = cw.CloseWrite(); w.err != nil {
		return w
	}
	w.server, w.err = readResult(c, (warm+w.msgs)*int64(size))
	return w
}

// roundTrip writes out and reads the echo into in (same length).
func roundTrip(c net.Conn, out, in []byte) error {
	if _, err := c.Write(out); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, in); err != nil {
		return err
	}
	return nil
}

// message is a size-byte message buffer: an rdma.Buffer's bytes when
// buffers, else Go memory; free gives it back.
func message(size int, buffers bool) (buf []byte, free func(), err error) {
	if !buffers {
		return make([]byte, size), func() {}, nil
	}
	b, err := rdma.AllocBuffer(size)
	if err != nil {
		return nil, nil, err
	}
	return b.Bytes(), func() { b.Free() }, nil
}
