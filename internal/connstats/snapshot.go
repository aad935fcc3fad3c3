package connstats

import "time"

// Snapshot is a connection's statistics as its wire's engine reads them,
// field for field the public rdma.ConnStats (which converts from it: the
// two must keep the same fields, in the same order, of the same types;
// the field comments are the public type's).
type Snapshot struct {
	BytesSent, BytesReceived, MessagesSent, MessagesReceived, Writes, Reads uint64

	Provider, Path, Wire, Fallback, Err, LocalAddr, RemoteAddr string

	Opened time.Time

	Closed bool

	ID, ListenerID uint64

	RTT time.Duration

	Retransmits uint64

	RingSize, PeerRingSize, SendBufferSize, SendDepth, RecvDepth, SendsPending, RecvsPosted, Credits, Buffered, SendBuffered int

	RingGrowths, SendBufferGrowths, QueueTrims uint64

	CreditWaits, RingWaits, SendBufferWaits uint64

	WriteWaitTime time.Duration

	ReadsAtOnce, ReadsHanded, ReadsSpun, ReadsSlept, Spins, SpinsCaught, SpinsRefused, Sleeps, ReadWaits, KeepAlives, PingsSent, PongsRecv, PingsRecv, PongsSent uint64

	SinceSent, SinceRecv, LastSeenStep time.Duration

	RemoteWrites, RemoteReads, RemoteBytesWritten, RemoteBytesRead, NotifiesSent, NotifiesReceived, Exposures uint64

	Exposed int

	RendezvousSent, RendezvousWindowed, RendezvousReceived uint64
}
