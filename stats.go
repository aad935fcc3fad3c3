package rdma

import (
	"time"

	"github.com/rdmanet/rdma/verbs/soft"
)

// ConnStats is what a connection has done so far, as (*Conn).Stats and
// (*RsocketConn).Stats see it at the moment of the call. Counters only
// grow; the sizes and depths are the connection's current ones.
//
// A message is one data write on the wire: one RDMA WRITE WITH IMMEDIATE
// that carries stream bytes. A Write of up to a chunk (a quarter of the
// peer's ring and of the send buffer, at most 1 MiB) that does not cross
// the end of the peer's ring is one message; a longer one is split into
// several. The peer counts the same messages as it receives them, so one
// side's MessagesSent is the other's MessagesReceived once they have
// arrived. Writes and Reads count the calls.
type ConnStats struct {
	// The stream as the program saw it.
	BytesSent        uint64 // bytes Write accepted (the sum of the counts it returned)
	BytesReceived    uint64 // bytes Read returned
	MessagesSent     uint64 // data writes posted (see above)
	MessagesReceived uint64 // data writes that arrived from the peer
	Writes           uint64 // Write calls that accepted at least a byte
	Reads            uint64 // Read calls that returned at least a byte

	// What carries it.
	Provider   string // "soft" or "rdmacore"
	Path       string // "rdmacore", "soft-shm" (shared memory) or "soft-tcp"; "" once closed
	Wire       string // "stream" (Conn) or "rsocket" (RsocketConn)
	Fallback   string // why an auto dial fell back to soft (Conn.Fallback); "" if it did not
	Err        string // why the connection failed; "" while it is healthy
	LocalAddr  string
	RemoteAddr string
	Opened     time.Time // when the connection was established
	Closed     bool

	// In the process's registry (registry.go), as the listings set them
	// (OpenConnStats, ConnStatsPage, ConnStatsByID; Stats leaves them 0):
	// the connection's number, unique in the process and kept while it is
	// open, and the number of the Listener that accepted it (0: dialed).
	ID         uint64
	ListenerID uint64

	// The transport's own view, where it has one (soft on TCP: the
	// kernel's TCP_INFO, as ss -i shows it; 0 elsewhere): its smoothed
	// round-trip time and the segments it sent again.
	RTT         time.Duration
	Retransmits uint64

	// Sizes and depths now.
	RingSize       int // our receive ring, bytes
	PeerRingSize   int // the peer's ring we write into, bytes
	SendBufferSize int // registered send buffer, bytes
	SendDepth      int // send work requests data and credits may occupy
	RecvDepth      int // receive work requests
	SendsPending   int // send work requests posted and not yet completed
	RecvsPosted    int // receive work requests posted
	Credits        int // message credits toward the peer: receives of its we may still consume
	Buffered       int // bytes arrived and not yet read
	SendBuffered   int // send buffer bytes whose writes have not completed

	// Growth. A connection starts with small rings and grows them when it
	// streams (ringgrowth.go, queuegrowth.go); a quiet one gives its send
	// queue slots back.
	RingGrowths       uint64 // our receive ring moved to a larger one
	SendBufferGrowths uint64 // our send buffer moved to a larger one
	QueueTrims        uint64 // the send queue went back to its starting slots while idle

	// Writes that had to wait, by what they lacked, and how long Writes
	// waited in all. A Write that waits several times counts each.
	CreditWaits     uint64 // no message credit or send queue slot
	RingWaits       uint64 // no room in the peer's ring (it has not read enough)
	SendBufferWaits uint64 // no room in the send buffer (sends not yet completed)
	WriteWaitTime   time.Duration

	// Reads that returned data, by how their data came: at once (it was
	// there), handed over (another caller polled it in), caught by a spin
	// of their own, or after a sleep on the completion channel.
	ReadsAtOnce  uint64
	ReadsHanded  uint64
	ReadsSpun    uint64
	ReadsSlept   uint64
	Spins        uint64        // busy-polls begun by the poll role (any caller)
	SpinsCaught  uint64        // of those, ones that caught a completion
	SpinsRefused uint64        // waits that would have spun but slept at once: the process's spin limit said no
	Sleeps       uint64        // sleeps on the completion channel
	ReadWaits    uint64        // times a Read waited for data
	KeepAlives   uint64        // keepalive probes sent (an idle connection's zero-length write)
	PingsSent    uint64        // heartbeat pings sent to a silent peer
	PongsRecv    uint64        // answers to them
	PingsRecv    uint64        // the peer's pings
	PongsSent    uint64        // answers to those
	SinceSent    time.Duration // since a message was last seen sent; -1: never
	SinceRecv    time.Duration // since a message was last seen received; -1: never
	LastSeenStep time.Duration // resolution of SinceSent and SinceRecv (see below)

	// One-sided operations (remote.go), the calls that succeeded. A
	// WriteRemoteNotify counts as a remote write and a notification sent.
	RemoteWrites       uint64 // WriteRemote and WriteRemoteNotify calls
	RemoteReads        uint64 // ReadRemote calls
	RemoteBytesWritten uint64 // bytes they wrote into the peer's exposed ranges
	RemoteBytesRead    uint64 // bytes they read from the peer's exposed ranges
	NotifiesSent       uint64 // WriteRemoteNotify calls
	NotifiesReceived   uint64 // notifications WaitNotify returned
	Exposures          uint64 // Expose calls
	Exposed            int    // ranges exposed to the peer now

	// Rendezvous (large Writes from Buffers, read by the peer's RDMA READ
	// where they lie): the transfers this side announced, how many of them
	// it exposed through a memory window (the rest by a registration of
	// their own), and the peer's transfers this side read.
	RendezvousSent     uint64
	RendezvousWindowed uint64
	RendezvousReceived uint64
}

// ConnTotals sums the counters of connections: ProcessStats holds them
// over every connection of the process, closed and open.
type ConnTotals struct {
	Opened, Closed    uint64 // connections established, and closed
	BytesSent         uint64
	BytesReceived     uint64
	MessagesSent      uint64
	MessagesReceived  uint64
	Writes, Reads     uint64
	RingGrowths       uint64
	SendBufferGrowths uint64
	CreditWaits       uint64
	RingWaits         uint64
	SendBufferWaits   uint64
	WriteWaitTime     time.Duration
	ReadsAtOnce       uint64
	ReadsHanded       uint64
	ReadsSpun         uint64
	ReadsSlept        uint64
	KeepAlives        uint64
	PingsSent         uint64
	PongsRecv         uint64
	Failed            uint64 // connections that ended with an error
	Fallbacks         uint64 // connections an auto dial carried on soft after rdmacore failed

	RemoteWrites       uint64
	RemoteReads        uint64
	RemoteBytesWritten uint64
	RemoteBytesRead    uint64
	NotifiesSent       uint64
	NotifiesReceived   uint64
	Exposures          uint64
	RendezvousSent     uint64
	RendezvousWindowed uint64
	RendezvousReceived uint64
}

func (t *ConnTotals) add(s ConnStats) {
	t.BytesSent += s.BytesSent
	t.BytesReceived += s.BytesReceived
	t.MessagesSent += s.MessagesSent
	t.MessagesReceived += s.MessagesReceived
	t.Writes += s.Writes
	t.Reads += s.Reads
	t.RingGrowths += s.RingGrowths
	t.SendBufferGrowths += s.SendBufferGrowths
	t.CreditWaits += s.CreditWaits
	t.RingWaits += s.RingWaits
	t.SendBufferWaits += s.SendBufferWaits
	t.WriteWaitTime += s.WriteWaitTime
	t.ReadsAtOnce += s.ReadsAtOnce
	t.ReadsHanded += s.ReadsHanded
	t.ReadsSpun += s.ReadsSpun
	t.ReadsSlept += s.ReadsSlept
	t.KeepAlives += s.KeepAlives
	t.PingsSent += s.PingsSent
	t.PongsRecv += s.PongsRecv
	t.RemoteWrites += s.RemoteWrites
	t.RemoteReads += s.RemoteReads
	t.RemoteBytesWritten += s.RemoteBytesWritten
	t.RemoteBytesRead += s.RemoteBytesRead
	t.NotifiesSent += s.NotifiesSent
	t.NotifiesReceived += s.NotifiesReceived
	t.Exposures += s.Exposures
	t.RendezvousSent += s.RendezvousSent
	t.RendezvousWindowed += s.RendezvousWindowed
	t.RendezvousReceived += s.RendezvousReceived
	if s.Err != "" {
		t.Failed++
	}
	if s.Fallback != "" {
		t.Fallbacks++
	}
}

// ProcessStats is the process's view: the totals over every connection it
// has had, how many are open, the devices' own counters, and the soft
// provider's engine counters (the soft device's counterpart of a NIC's
// hw_counters; all zero in a process that has not used soft).
type ProcessStats struct {
	Open       int            // connections open now
	OpenByPath map[string]int // of those, how many on each Path ("rdmacore", "soft-shm", "soft-tcp")
	Totals     ConnTotals     // over every connection, closed and open
	Devices    []DeviceCounters
	Soft       soft.Counters
}
