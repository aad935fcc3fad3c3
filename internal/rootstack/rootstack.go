// Package rootstack hands the suites below the root package
// (internal/conntest) what they run of it, Dial, Listen, Buffers and a
// conn's statistics, without their importing it: the root package sets
// its Stack at init, so every binary that links it (each test binary that
// runs the suite imports it to configure it) has one. The root's Config
// travels as an any: the suite's caller writes an rdma.Config, the suite
// reads and tunes it through Tuning.
package rootstack

import (
	"context"
	"net"
	"time"
)

// Tuning is what the suites read of a root Config and change in it.
type Tuning struct {
	Provider, Wire      string
	RingSize            int
	SendBufferSize      int
	RecvDepth           int
	SendDepth           int
	RendezvousThreshold int
	KeepAlive           time.Duration
	PeerTimeout         time.Duration
}

// Buffer is a root Buffer: registered memory that the conns' Writes take
// the zero-copy paths from.
type Buffer interface {
	Bytes() []byte
	Free() error
}

// Stack is the root package as the suites use it. A cfg is an
// rdma.Config value (nil: its zero value).
type Stack interface {
	// Tuning is cfg's tunable fields.
	Tuning(cfg any) Tuning
	// Tune is a copy of cfg with its tunable fields set to t's.
	Tune(cfg any, t Tuning) any
	// Listen listens on addr with cfg.
	Listen(ctx context.Context, cfg any, addr string) (net.Listener, error)
	// Dial dials addr with cfg, within timeout (0: none beyond ctx).
	Dial(ctx context.Context, cfg any, addr string, timeout time.Duration) (net.Conn, error)
	// AllocBuffer allocates a Buffer of n bytes.
	AllocBuffer(n int) (Buffer, error)
	// Rendezvous is how many Writes of c took the rendezvous, and how
	// many of those through a memory window; ok is false for a conn that
	// has no such count (the rsocket wire's).
	Rendezvous(c net.Conn) (sent, windowed uint64, ok bool)
}

var root Stack

// Set is the root package's registration of its Stack.
func Set(s Stack) { root = s }

// Root is the Stack the root package set, nil in a binary without it.
func Root() Stack { return root }
