package streamconn

import "time"

// Config is the public rdma.Config as the engine takes it, field for field
// (the face converts it: the two must keep the same fields, in the same
// order, of the same types; the fields' meaning is the public type's),
// with its defaults filled in, PollTime resolved (0: never poll) and
// BusyPoll or'ed with its environment variable.
type Config struct {
	Provider string

	Wire string

	RingSize int

	SendBufferSize int

	SendDepth int

	RecvDepth int

	InlineThreshold int

	KeepAlive time.Duration

	PeerTimeout time.Duration

	PollTime time.Duration

	BusyPoll bool

	HandshakeTimeout time.Duration

	RDMAOnly bool

	RDMAConnectTimeout time.Duration

	TrafficClass int

	RendezvousThreshold int
}
