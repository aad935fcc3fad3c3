package soft

import (
	"errors"
	"time"
)

// errInterrupted ends a read between frames early (see transport.interrupt).
var errInterrupted = errors.New("soft: read interrupted")

// transport is the seam between the QP engine (engine.go: send and receive
// queues, PSNs, acknowledgements, RNR and transport retries, completions)
// and how frames move between the two ends of a connection. The engine
// frames everything itself (wire.go); a transport only moves bytes in order,
// reliably, with vectored writes straight out of registered memory and reads
// straight into it.
//
// Two transports implement it: TCP (tcp.go), where the connection that
// carried the CM handshake then carries the frames, and shared memory
// between two processes on one host (shm.go, shm_transport_linux.go). The REQ offers a
// set of transports (hsMsg.transports, with setup data in hsMsg.ext), the
// REP picks one, and the CM hands the engine whichever transport was chosen;
// the engine is the same on both.
//
// Concurrency: one goroutine (the engine's receiver) calls the read methods;
// one holder of the engine's transmit role at a time calls writev. close may
// be called at any time by anyone and unblocks both.
type transport interface {
	// readHeader fills h with the next hdrLen bytes, blocking until they
	// arrive; io.EOF (or another error) when the stream ends, errInterrupted
	// after interrupt or the idle hook (bytes read so far stay buffered).
	readHeader(h *[hdrLen]byte) error
	// readPayload fills dst with the next len(dst) bytes. dst lies in the
	// region fenced by g (zero: not a registered region's memory); g is
	// held only while bytes already there are copied, and once it is
	// closed (or opened again since g was taken) the rest of dst is
	// skipped on the stream and readPayload returns errFenced (fence.go).
	readPayload(dst []byte, g gateRef) error
	// discard skips the next n bytes.
	discard(n int) error
	// holds reports whether the next n bytes are here already, so that
	// readPayload of them copies without waiting on the peer (the
	// responder then reads a small payload under the QP's lock). It may
	// say false where they are: a false costs only a second hold of the
	// lock.
	holds(n int) bool
	// setIdle installs a hook that the read methods call when they are
	// about to block for lack of input (once per wait). The engine flushes
	// coalesced acknowledgements there, so that the check costs no extra
	// system call. boundary says the read is readHeader's (between frames);
	// there, the hook returning true abandons the read with errInterrupted.
	setIdle(f func(boundary bool) bool)
	// setSpin sets how long a read that would block polls for input
	// before it parks (0: it parks at once; the process's spin limit,
	// spinGate, may refuse the polling or end it sooner), and returns, since the last
	// setSpin, the longest polling that input ended (polled) and how long
	// reads parked. A parked reader's wake-up goes through the kernel and
	// the runtime's poller; a polling one sees the input as it lands
	// (qp.drive). Called by the receive role's holder. Only the TCP
	// transport polls as told: the shared-memory reader spins by its own
	// rule (shmTransport.wait), and reports its sleeps.
	setSpin(d time.Duration) (polled, parked time.Duration)
	// interrupt makes a read blocked between frames return errInterrupted
	// (a read inside a frame carries on). Any goroutine may call it.
	interrupt()
	// writev writes the buffers in order. With wait false it never blocks:
	// it writes what the transport takes now and returns the count (0 and a
	// nil error when nothing fits). With wait true it returns once all are
	// written or the transport failed. gates, if not nil, holds beside
	// each buffer the fence of the region it lies in, held only while
	// bytes are copied out of it; once one is closed nothing more of its
	// buffer is read and writev returns errFenced, the stream left inside
	// a frame (the engine then closes the transport).
	writev(bufs [][]byte, gates []gateRef, wait bool) (int, error)
	// closeWrite ends the outgoing stream after what was written (the
	// peer's reads then end with io.EOF).
	closeWrite() error
	// setReadDeadline bounds the blocking reads (zero: none).
	setReadDeadline(t time.Time) error
	// close releases the transport and unblocks everything.
	close() error
	// answering reports whether the transport itself is alive and
	// answered: the peer's end is there and acknowledges what is sent,
	// whether or not the peer's process runs (liveness.go). The engine's
	// watchdog asks it when the peer's engine has left sent work
	// unanswered for a timeout.
	answering() bool
}
