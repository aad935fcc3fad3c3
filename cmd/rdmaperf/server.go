package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rdmanet/rdma"
)

// headerTimeout bounds how long a new connection may take to send its
// control header, so that a silent one does not hold a goroutine forever.
const headerTimeout = 10 * time.Second

// testGrace is added to a test's announced duration to bound how long the
// server serves it: the warm-up, the drain, a slow client.
const testGrace = 60 * time.Second

// server serves rdmaperf tests on an rdma listener and, for the baseline,
// a TCP listener; every connection is one test.
type server struct {
	rdmaLn net.Listener
	tcpLn  net.Listener // nil: no baseline listener
	log    io.Writer    // one line per test served and per refused connection

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// listen starts a server: rdma on o.addr and, unless tcpAddr is "", TCP on
// tcpAddr.
func listen(ctx context.Context, o *options, tcpAddr string, log io.Writer) (*server, error) {
	lc := rdma.ListenConfig{Config: o.rdmaConfig()}
	rl, err := lc.Listen(ctx, "rdma", o.addr)
	if err != nil {
		return nil, err
	}
	s := &server{rdmaLn: rl, log: log, conns: map[net.Conn]struct{}{}}
	if tcpAddr != "" {
		tl := net.ListenConfig{Control: congestionControl(o.tcpCC)} // accepted sockets inherit it
		s.tcpLn, err = tl.Listen(ctx, "tcp", tcpAddr)
		if err != nil {
			rl.Close()
			return nil, fmt.Errorf("TCP baseline listener: %w", err)
		}
	}
	s.wg.Add(1)
	go s.acceptLoop(s.rdmaLn)
	if s.tcpLn != nil {
		s.wg.Add(1)
		go s.acceptLoop(s.tcpLn)
	}
	return s, nil
}

func (o *options) rdmaConfig() *rdma.Config {
	return &rdma.Config{Provider: o.provider, RingSize: o.ringSize, PollTime: o.pollTime, RendezvousThreshold: o.rndv}
}

func (s *server) rdmaAddr() string { return s.rdmaLn.Addr().String() }

func (s *server) tcpAddr() string {
	if s.tcpLn == nil {
		return ""
	}
	return s.tcpLn.Addr().String()
}

func (s *server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (too many files, a failed handshake): keep serving.
			fmt.Fprintf(s.log, "rdmaperf server: accept: %v\n", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serve(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// close stops accepting, ends the tests in progress and waits for them.
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	s.rdmaLn.Close()
	if s.tcpLn != nil {
		s.tcpLn.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func transportOf(c net.Conn) string {
	if rc, ok := c.(*rdma.Conn); ok {
		return "rdma/" + rc.Provider()
	}
	return "tcp"
}

// serve runs one test on c: header, reply, then the test itself.
func (s *server) serve(c net.Conn) {
	peer := c.RemoteAddr().String()
	tr := transportOf(c)
	var hb [headerLen]byte
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		fmt.Fprintf(s.log, "rdmaperf server: %s %s: no control header: %v\n", tr, peer, err)
		return
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		fmt.Fprintf(s.log, "rdmaperf server: %s %s: %v\n", tr, peer, err)
		c.SetWriteDeadline(time.Now().Add(headerTimeout))
		writeReply(c, err)
		return
	}
	c.SetReadDeadline(time.Time{})
	if err := writeReply(c, nil); err != nil {
		fmt.Fprintf(s.log, "rdmaperf server: %s %s: reply: %v\n", tr, peer, err)
		return
	}
	if h.Duration > 0 {
		c.SetDeadline(time.Now().Add(h.Duration + testGrace))
	}
	res, err := serveTest(c, h)
	if err == nil {
		var b [resultLen]byte
		res.marshal(&b)
		_, err = c.Write(b[:])
	}
	what := fmt.Sprintf("%s %s: %s %s", tr, peer, kindName(h.Kind), formatSize(h.Size))
	if err != nil {
		fmt.Fprintf(s.log, "rdmaperf server: %s: after %d bytes: %v\n", what, res.Bytes, err)
		return
	}
	fmt.Fprintf(s.log, "rdmaperf server: %s: %d bytes in %v (%.1f MiB/s), %.0f%% CPU\n", what, res.Bytes,
		res.Elapsed.Round(time.Millisecond), mibps(res.Bytes, res.Elapsed), 100*cpuShare(res.CPU, res.Elapsed))
}

// serveTest runs the test h asks for and counts what it received.
func serveTest(c net.Conn, h header) (serverResult, error) {
	size := h.Size
	if h.Kind == kindStream {
		// A stream is read in chunks of at least 64 KiB whatever the
		// message size, so that for small messages the reader is not what
		// is measured.
		size = max(size, 64<<10)
	}
	buf, free, err := message(size, h.Buffers)
	if err != nil {
		return serverResult{}, err
	}
	defer free()
	var m meter
	switch h.Kind {
	case kindStream:
		err = serveStream(c, buf, &m)
	case kindLatency:
		err = serveEcho(c, buf, &m)
	}
	return m.stop(), err
}

// meter counts a test's bytes and times it from the first byte on: wall
// time and the process's CPU time.
type meter struct {
	res   serverResult
	first time.Time
	cpu0  time.Duration
}

// start starts the clocks if no byte has been counted yet.
func (m *meter) start() {
	if m.res.Bytes == 0 {
		m.first, m.cpu0 = time.Now(), processCPU()
	}
}

// stop stops the clocks and returns the count.
func (m *meter) stop() serverResult {
	if m.res.Bytes > 0 {
		m.res.Elapsed, m.res.CPU = time.Since(m.first), processCPU()-m.cpu0
	}
	return m.res
}

// serveStream reads until the client's CloseWrite.
func serveStream(c net.Conn, buf []byte, m *meter) error {
	for {
		n, err := c.Read(buf)
		if n > 0 {
			m.start()
			m.res.Bytes += int64(n)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// serveEcho sends back every len(buf)-byte message until the client's
// CloseWrite.
func serveEcho(c net.Conn, buf []byte, m *meter) error {
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			switch err {
			case io.EOF:
				return nil
			case io.ErrUnexpectedEOF:
				return fmt.Errorf("the client stopped inside a %d-byte message", len(buf))
			}
			return err
		}
		m.start()
		if _, err := c.Write(buf); err != nil {
			return err
		}
		m.res.Bytes += int64(len(buf))
	}
}

// cpuShare is cpu over wall time: 1.0 is one core busy all the time.
func cpuShare(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(cpu) / float64(wall)
}

func mibps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / (1 << 20)
}

// runServer is -s: serve until ctx ends (SIGINT, SIGTERM) or, for the child
// of -fork, until stdin closes (the parent is done or gone).
func runServer(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	log := stdout
	if o.quiet || o.child {
		log = io.Discard
	}
	s, err := listen(ctx, o, o.tcpAddr, log)
	if err != nil {
		return err
	}
	defer s.close()
	if o.child {
		// The parent reads this line to learn the ports.
		fmt.Fprintf(stdout, "%s %s %s\n", childReady, s.rdmaAddr(), s.tcpAddr())
		done := make(chan struct{})
		go func() {
			io.Copy(io.Discard, os.Stdin)
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	fmt.Fprintf(stdout, "rdmaperf server: rdma on %s (provider %s), TCP baseline on %s\n",
		s.rdmaAddr(), s.rdmaLn.(*rdma.Listener).Provider(), s.tcpAddr())
	<-ctx.Done()
	return nil
}

const childReady = "rdmaperf-server-ready"
