package soft

import (
	"net"
	"sync"
	"sync/atomic"
)

// Whether a transport is alive, as the watchdog (engine.go) asks it: a
// peer whose transport answers is a live NIC whose process does not run,
// and costs no retry; one whose transport goes unanswered is unreachable.
//
//   - TCP: the peer's kernel acknowledges the stream for a process that is
//     stopped (and answers window probes once its receive buffer is full),
//     so the connection is alive while the kernel has no retransmission or
//     probe outstanding unanswered (TCP_INFO's retransmits and probes).
//     A peer host that vanished, or a network that drops everything,
//     shows as both.
//   - Shared memory: the peer is on this host; its death closes the
//     liveness connection (shmTransport.watch), so the transport is alive
//     until then.
//
// A process that dies has its connections closed by its kernel: the
// receiver sees the transport end, and the QP fails at once, whatever the
// watchdog's count.

// silenced holds, for tests (export_test.go's Silence), the local
// addresses of transports whose QP plays a hung host: a peer that answers
// nothing, transport included. silencedN keeps the look-up off every
// other path.
var (
	silenced  sync.Map
	silencedN atomic.Int32
)

// silencedEnd reports whether c's peer end was silenced.
func silencedEnd(c net.Conn) bool {
	if silencedN.Load() == 0 || c == nil {
		return false
	}
	_, ok := silenced.Load(c.RemoteAddr().String())
	return ok
}

// silence marks q's transport as a hung host's.
func silence(q *qp) {
	q.mu.Lock()
	tr := q.tr
	q.mu.Unlock()
	var c net.Conn
	switch t := tr.(type) {
	case *tcpTransport:
		c = t.c
	default:
		c = shmLiveness(tr)
	}
	if c != nil {
		silenced.Store(c.LocalAddr().String(), true)
		silencedN.Add(1)
	}
}
