package streamconn

import "time"

// Config is what the engine reads of the public rdma.Config, with the
// public type's defaults filled in (the face builds it: newConn in the
// root's conn.go). The meaning of each setting is the public field
// of the same name; the rest of the public Config (the provider, the wire,
// the dial's fallback and traffic class) is spent before a connection's
// engine exists.
type Config struct {
	// The sizes of the connection's memory, in bytes (powers of two),
	// and of its queues, in work requests.
	RingSize, SendBufferSize, SendDepth, RecvDepth int

	// The largest send copied into the work request (0: none), and the
	// smallest Write from a Buffer the peer reads in place (0: the
	// provider's default, negative: never; rndv.go).
	InlineThreshold, RendezvousThreshold int

	// The timers: KeepAlive and PeerTimeout (0 or negative: off), and
	// HandshakeTimeout, which also bounds Close's drain.
	KeepAlive, PeerTimeout, HandshakeTimeout time.Duration

	// How a wait polls: for PollTime (resolved: 0 never polls), or
	// without sleeping if BusyPoll (or'ed with RDMA_BUSY_POLL).
	PollTime time.Duration
	BusyPoll bool
}
