package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkRaftApplyTransports applies raft-apply's entries (every tenth
// 64 KiB, from raftWorkers goroutines) to a three-node cluster in this one
// process, over raft's in-memory transport (messages handed over in the
// process, no bytes copied: a transport that costs nothing) and over Go's
// TCP on loopback. Their ratio is the most any transport could gain raft
// here: the rest of an entry's time is raft's own.
//
//	go test -run '^$' -bench RaftApplyTransports -benchtime 10000x -count 5
func BenchmarkRaftApplyTransports(b *testing.B) {
	for _, kind := range []string{"inmem", "pipe", "tcp", "rdma"} {
		b.Run(kind, func(b *testing.B) {
			rafts, stop := raftCluster(b, kind)
			defer stop()
			leader := raftLeaderOf(b, rafts)
			var wg sync.WaitGroup
			errs := make([]error, raftWorkers)
			b.ResetTimer()
			for w := range raftWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < b.N; i += raftWorkers {
						data := raftEntry(i)
						f := leader.Apply(data, 30*time.Second)
						if err := f.Error(); err != nil {
							errs[w] = err
							return
						}
						if got, ok := f.Response().(int); !ok || got != len(data) {
							errs[w] = fmt.Errorf("entry %d applied as %v", i, f.Response())
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// raftCluster starts three bootstrapped raft nodes over transports of
// kind "inmem" or "tcp".
func raftCluster(b *testing.B, kind string) ([]*raft.Raft, func()) {
	var trans []raft.Transport
	var closers []func()
	switch kind {
	case "inmem":
		var ts []*raft.InmemTransport
		for range 3 {
			_, t := raft.NewInmemTransport("")
			ts = append(ts, t)
			trans = append(trans, t)
		}
		for _, a := range ts {
			for _, c := range ts {
				if a != c {
					a.Connect(c.LocalAddr(), c)
				}
			}
		}
	case "pipe":
		mn := &memNet{listeners: map[string]*memListener{}}
		for i := range 3 {
			ln := mn.listen(fmt.Sprintf("mem%d", i))
			t := raft.NewNetworkTransportWithLogger(ln, 3, 10*time.Second, hclog.NewNullLogger())
			trans = append(trans, t)
			closers = append(closers, func() { _ = t.Close() })
		}
	case "tcp", "rdma":
		for range 3 {
			tr, err := newTransport(kind, "soft", "127.0.0.1")
			if err != nil {
				b.Fatal(err)
			}
			ln, err := tr.listen()
			if err != nil {
				b.Fatal(err)
			}
			t := raft.NewNetworkTransportWithLogger(&streamLayer{Listener: ln, t: tr}, 3, 10*time.Second, hclog.NewNullLogger())
			trans = append(trans, t)
			closers = append(closers, func() { _ = t.Close() })
		}
	}
	var c raft.Configuration
	for i, t := range trans {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(fmt.Sprint(i)), Address: t.LocalAddr()})
	}
	var rafts []*raft.Raft
	for i, t := range trans {
		cfg := raft.DefaultConfig()
		cfg.LocalID = raft.ServerID(fmt.Sprint(i))
		cfg.Logger = hclog.NewNullLogger()
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(cfg, &hashFSM{}, store, store, raft.NewInmemSnapshotStore(), t)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.BootstrapCluster(c).Error(); err != nil {
			b.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	return rafts, func() {
		for _, r := range rafts {
			_ = r.Shutdown().Error()
		}
		for _, f := range closers {
			f()
		}
	}
}

// raftLeaderOf waits for one of rafts to lead.
func raftLeaderOf(b *testing.B, rafts []*raft.Raft) *raft.Raft {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("no leader within 30 s")
	return nil
}

// memNet is a network of in-process byte streams for raft's
// NetworkTransport: a Write copies into the peer's buffer once and a Read
// copies out once, with no system call. It is the floor of what carrying
// raft's encoded messages costs; the encoding itself stays.
type memNet struct {
	mu        sync.Mutex
	listeners map[string]*memListener
}

func (n *memNet) listen(addr string) *memListener {
	l := &memListener{net: n, addr: memAddr(addr), conns: make(chan net.Conn, 16), done: make(chan struct{})}
	n.mu.Lock()
	n.listeners[addr] = l
	n.mu.Unlock()
	return l
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

type memListener struct {
	net   *memNet
	addr  memAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

func (l *memListener) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.net.mu.Lock()
	peer := l.net.listeners[string(addr)]
	l.net.mu.Unlock()
	if peer == nil {
		return nil, fmt.Errorf("no listener at %s", addr)
	}
	a, b := newMemPipe(), newMemPipe()
	select {
	case peer.conns <- &memConn{r: b, w: a, local: l.addr, remote: peer.addr}:
	case <-peer.done:
		return nil, net.ErrClosed
	}
	return &memConn{r: a, w: b, local: l.addr, remote: peer.addr}, nil
}

// memPipe is one direction of a memConn: a buffer, and a condition for
// the reader.
type memPipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	closed bool
}

func newMemPipe() *memPipe {
	p := &memPipe{}
	p.cond.L = &p.mu
	return p
}

type memConn struct {
	r, w          *memPipe
	local, remote memAddr
}

func (c *memConn) Read(b []byte) (int, error) {
	p := c.r
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && !p.closed {
		p.cond.Wait()
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[:copy(p.buf, p.buf[n:])]
	return n, nil
}

func (c *memConn) Write(b []byte) (int, error) {
	p := c.w
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, net.ErrClosed
	}
	p.buf = append(p.buf, b...)
	p.cond.Signal()
	return len(b), nil
}

func (c *memConn) Close() error {
	for _, p := range []*memPipe{c.r, c.w} {
		p.mu.Lock()
		p.closed = true
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	return nil
}

func (c *memConn) LocalAddr() net.Addr              { return c.local }
func (c *memConn) RemoteAddr() net.Addr             { return c.remote }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
