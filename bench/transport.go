package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdma"
)

// A transport is what a workload's connections are made of: "rdma"
// (rdma.Dialer and rdma.ListenConfig on the run's provider) or "tcp" (Go's
// net package), on the same host address.
type transport struct {
	name     string // "rdma" or "tcp"
	provider string // rdma's Config.Provider: "soft", "rdmacore" or "" (auto)
	host     string // the address listeners bind to, without a port

	mu    sync.Mutex
	conns []net.Conn // dialed rdma connections, for the paths they took
}

func newTransport(name, provider, host string) (*transport, error) {
	if name != "rdma" && name != "tcp" {
		return nil, fmt.Errorf("bench: unknown transport %q (rdma or tcp)", name)
	}
	return &transport{name: name, provider: provider, host: host}, nil
}

func (t *transport) config() *rdma.Config { return &rdma.Config{Provider: t.provider} }

// listen opens a listener on an ephemeral port of the host address.
func (t *transport) listen() (net.Listener, error) {
	addr := net.JoinHostPort(t.host, "0")
	if t.name == "tcp" {
		return net.Listen("tcp", addr)
	}
	lc := rdma.ListenConfig{Config: t.config()}
	return lc.Listen(context.Background(), "rdma", addr)
}

// dial connects to addr; an rdma connection is remembered for paths.
func (t *transport) dial(ctx context.Context, addr string) (net.Conn, error) {
	if t.name == "tcp" {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	d := rdma.Dialer{Config: t.config(), Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "rdma", addr)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.conns = append(t.conns, c)
	t.mu.Unlock()
	return c, nil
}

// paths says which paths the rdma connections dialed since the last call
// took, as they stand now ("soft-shm x4"), and forgets them; "" for tcp.
func (t *transport) paths() string {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	return pathCounts(conns)
}

// peekPaths is paths without forgetting the connections.
func (t *transport) peekPaths() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return pathCounts(t.conns)
}

// pathCounts counts the paths of conns that are *rdma.Conn.
func pathCounts(conns []net.Conn) string {
	n := map[string]int{}
	for _, c := range conns {
		if rc, ok := c.(*rdma.Conn); ok {
			p := rc.Stats().Path
			if p == "" {
				p = "closed"
			}
			n[p]++
		}
	}
	var parts []string
	for p, k := range n {
		parts = append(parts, fmt.Sprintf("%s x%d", p, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// trackingListener remembers the connections it accepted (for the paths
// of a server's side).
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) paths() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return pathCounts(l.conns)
}

// cpuTime is CPU time spent, in user mode and in the kernel. The kernel's
// part is where TCP's own cost shows (its copies, wake-ups and system
// calls), so TCP's CPU per op minus it bounds what any transport could
// save: a CPU-bound workload's rdma/TCP ratio cannot pass
// total/(total - sys) of TCP's even if rdma's transport cost nothing.
type cpuTime struct {
	User time.Duration `json:"user"`
	Sys  time.Duration `json:"sys"`
}

func (c cpuTime) total() time.Duration { return c.User + c.Sys }

func (c cpuTime) plus(o cpuTime) cpuTime  { return cpuTime{c.User + o.User, c.Sys + o.Sys} }
func (c cpuTime) minus(o cpuTime) cpuTime { return cpuTime{c.User - o.User, c.Sys - o.Sys} }

// processCPU is this process's CPU time so far.
func processCPU() cpuTime {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTime{}
	}
	return cpuTime{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}
}
