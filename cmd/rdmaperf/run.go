package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// runClient runs every test (each size, each round, rdma then TCP) against
// the server at o.addr, or against a server it starts itself for -loopback.
func runClient(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	rdmaAddr, tcpAddr := o.addr, o.tcpAddr
	if o.loopback {
		var stop func()
		var err error
		if o.fork {
			rdmaAddr, tcpAddr, stop, err = forkServer(ctx, o)
		} else {
			rdmaAddr, tcpAddr, stop, err = inProcessServer(ctx, o)
		}
		if err != nil {
			return nil, fmt.Errorf("starting the loopback server: %w", err)
		}
		defer stop()
	}
	rep := newReport(o)
	rep.Address = rdmaAddr
	transports := []transport{rdmaTransport(o, rdmaAddr)}
	if o.baseline {
		rep.TCPAddress = tcpAddr
		transports = append(transports, tcpTransport(tcpAddr, o.tcpCC))
	}

	type key struct {
		kind uint8
		size int
		tr   string
	}
	index := map[key]int{}
	total := 0
	for _, k := range o.tests {
		total += len(o.sizesFor(k)) * o.rounds * len(transports)
	}
	prog := newProgress(stderr, !o.quiet, total, o.iterations == 0, o.warmup+o.duration)
	defer prog.stop()

	for _, kind := range o.tests {
		for _, size := range o.sizesFor(kind) {
			for round := 1; round <= o.rounds; round++ {
				for _, tr := range transports {
					spec := testSpec{kind: kind, size: size, parallel: o.parallel, buffers: o.buffers,
						duration: o.duration, iterations: o.iterations, warmup: o.warmup}
					label := fmt.Sprintf("%s size=%s over %s, round %d/%d", kindName(kind), formatSize(size), tr.name, round, o.rounds)
					prog.begin(label)
					m, provider, err := runTest(ctx, tr, spec)
					if err != nil {
						return nil, err
					}
					k := key{kind, size, tr.name}
					i, ok := index[k]
					if !ok {
						i = len(rep.Results)
						index[k] = i
						rep.Results = append(rep.Results, result{Test: kindName(kind), Size: size,
							Transport: tr.name, Provider: provider, Parallel: o.parallel})
					}
					rep.Results[i].Rounds = append(rep.Results[i].Rounds, m)
					prog.done(label, kind, m)
				}
			}
		}
	}
	if o.memcpy {
		addMemcpy(rep, o)
	}
	rep.Finish()
	return rep, nil
}

func (o *options) sizesFor(kind uint8) []int {
	if o.sizes != nil {
		return o.sizes
	}
	if kind == kindStream {
		return []int{defaultStreamSize}
	}
	return []int{defaultLatSize}
}

// inProcessServer serves the loopback run from this process.
func inProcessServer(ctx context.Context, o *options) (rdmaAddr, tcpAddr string, stop func(), err error) {
	tcp := ""
	if o.baseline {
		tcp = o.tcpAddr
	}
	s, err := listen(ctx, o, tcp, io.Discard)
	if err != nil {
		return "", "", nil, err
	}
	return s.rdmaAddr(), s.tcpAddr(), s.close, nil
}

// serverChildEnv marks a process started by forkServer; a test binary reads
// it to act as rdmaperf instead of running its tests.
const serverChildEnv = "RDMAPERF_SERVER_CHILD"

// forkServer starts this program again as the server, so that the two ends
// run in separate processes as they would between hosts. The child prints
// its addresses on stdout and exits when its stdin closes, so it cannot
// outlive this process.
func forkServer(ctx context.Context, o *options) (rdmaAddr, tcpAddr string, stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", "", nil, err
	}
	args := []string{"-s", "-child", "-q", "-addr", o.addr, "-tcp-addr", o.tcpAddr}
	if o.provider != "" {
		args = append(args, "-provider", o.provider)
	}
	if o.tcpCC != "" {
		args = append(args, "-tcp-cc", o.tcpCC)
	}
	if o.ringSize > 0 {
		args = append(args, "-ring", fmt.Sprint(o.ringSize))
	}
	if o.cpuProfile != "" {
		args = append(args, "-cpuprofile", o.cpuProfile+".server")
	}
	if o.rndv != 0 {
		args = append(args, "-rndv", fmt.Sprint(o.rndv))
	}
	if o.pollTime != 0 {
		args = append(args, "-poll", o.pollTime.String())
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), serverChildEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", "", nil, err
	}
	waited := make(chan error, 1)
	stop = func() {
		stdin.Close()
		select {
		case <-waited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-waited
		}
	}
	type ready struct {
		line string
		err  error
	}
	readyCh := make(chan ready, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		readyCh <- ready{line, err}
		io.Copy(io.Discard, stdout) // until the child exits
		waited <- cmd.Wait()
	}()
	fail := func(err error) (string, string, func(), error) {
		stop()
		return "", "", nil, err
	}
	select {
	case r := <-readyCh:
		f := strings.Fields(r.line)
		if r.err != nil || len(f) != 3 || f[0] != childReady {
			return fail(fmt.Errorf("the server process did not start (said %q, %v)", strings.TrimSpace(r.line), r.err))
		}
		return f[1], f[2], stop, nil
	case <-time.After(30 * time.Second):
		return fail(errors.New("the server process did not say it was ready within 30s"))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// progress writes lines on stderr during runs longer than a few seconds:
// each finished test's figures, and a reminder of the one running every few
// seconds while it lasts.
type progress struct {
	w       io.Writer
	enabled bool
	start   time.Time
	long    bool // the run is expected to last more than progressAfter
	total   int
	mu      sync.Mutex
	n       int
	label   string
	began   time.Time
	lastOut time.Time
	quit    chan struct{}
	wg      sync.WaitGroup
}

const (
	progressAfter = 3 * time.Second
	progressEvery = 2 * time.Second
)

func newProgress(w io.Writer, enabled bool, total int, timed bool, each time.Duration) *progress {
	p := &progress{w: w, enabled: enabled, start: time.Now(), total: total, quit: make(chan struct{})}
	if !enabled {
		return p
	}
	p.long = timed && time.Duration(total)*each > progressAfter
	p.wg.Add(1)
	go p.tick()
	return p
}

func (p *progress) tick() {
	defer p.wg.Done()
	t := time.NewTicker(progressEvery / 2)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case now := <-t.C:
			p.mu.Lock()
			if p.label != "" && now.Sub(p.start) >= progressAfter && now.Sub(p.lastOut) >= progressEvery {
				fmt.Fprintf(p.w, "rdmaperf: [%5.1fs] test %d/%d %s: running for %.1fs\n",
					now.Sub(p.start).Seconds(), p.n+1, p.total, p.label, now.Sub(p.began).Seconds())
				p.lastOut = now
			}
			p.mu.Unlock()
		}
	}
}

func (p *progress) begin(label string) {
	p.mu.Lock()
	p.label, p.began = label, time.Now()
	p.mu.Unlock()
}

func (p *progress) done(label string, kind uint8, m measure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.label = ""
	now := time.Now()
	if !p.enabled || (!p.long && now.Sub(p.start) < progressAfter) {
		return
	}
	fig := fmt.Sprintf("%.1f MiB/s", m.BytesPerSec/(1<<20))
	if kind == kindLatency {
		fig = fmt.Sprintf("p50 %s p99 %s", usText(m.P50Ns), usText(m.P99Ns))
	}
	fmt.Fprintf(p.w, "rdmaperf: [%5.1fs] test %d/%d %s: %s\n", now.Sub(p.start).Seconds(), p.n, p.total, label, fig)
	p.lastOut = now
}

func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}

// addMemcpy measures single-core memory copy bandwidth at each stream size
// (Go's copy between two buffers of that size, about 200 ms a round), the
// reference line of a run: what one core moves when all it does is copy.
func addMemcpy(r *report, o *options) {
	for _, size := range o.sizesFor(kindStream) {
		res := result{Test: "stream", Size: size, Transport: "memcpy", Parallel: 1}
		src, dst := make([]byte, size), make([]byte, size)
		for i := range src {
			src[i] = byte(i)
		}
		for range o.rounds {
			var n int64
			start := time.Now()
			for time.Since(start) < 200*time.Millisecond {
				copy(dst, src)
				n++
			}
			d := time.Since(start)
			res.Rounds = append(res.Rounds, measure{Bytes: n * int64(size), Messages: n, Seconds: d.Seconds(),
				BytesPerSec: float64(n*int64(size)) / d.Seconds(), MsgsPerSec: float64(n) / d.Seconds()})
		}
		r.Results = append(r.Results, res)
	}
}
