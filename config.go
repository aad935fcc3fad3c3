package rdma

import (
	"cmp"
	"math/bits"
	"os"
	"time"

	"github.com/rdmanet/rdma/internal/stream"
)

// Config tunes connections. A nil *Config and the zero Config are valid and
// mean the defaults; out-of-range values are clamped (see each field).
type Config struct {
	// Provider is the verbs provider: "soft", "rdmacore", "auto" or "".
	// "" reads the RDMA_PROVIDER environment variable and, if that is empty
	// too, means "auto": rdmacore when a device with an active port exists,
	// else soft.
	Provider string

	// Wire is the protocol spoken on the connection: "rdma" (this
	// package's own, the default) or "rsocket" (rdma-core's rsockets, to
	// talk to C programs that use librdmacm's rsocket API directly or
	// through LD_PRELOAD=librspreload.so; conns are *RsocketConn). ""
	// reads the RDMA_WIRE environment variable and, if that is empty too,
	// means "rdma"; anything else makes Dial and Listen fail. Both ends
	// must speak the same. In rsocket mode the sizes below default to
	// rsocket's (RingSize and SendBufferSize 128 KiB, SendDepth and
	// RecvDepth 384 in [16, 65534], InlineThreshold 64): see the package
	// doc, "Talking to rsockets".
	Wire string

	// RingSize is the receive ring each side registers for the peer to write
	// into: how many bytes may be in flight toward a connection before its
	// reader consumes them. Rounded up to a power of two in [4 KiB, 1 GiB];
	// default 1 MiB.
	//
	// RingSize and SendBufferSize are what a connection may grow to: it
	// starts with a ring and a send buffer of 64 KiB (these sizes, if
	// smaller) and one inline slot per send WR ((SendDepth+2) x the
	// inline size granted; none on soft), and moves to these sizes once it
	// streams (a peer of protocol version 2 is given RingSize at once).
	// So an idle connection registers about 130 KiB, a busy one about
	// RingSize + SendBufferSize; a NIC pins what is registered, and on
	// soft only the pages a connection has touched are resident. See
	// docs/design.md, "What a connection costs".
	RingSize int

	// SendBufferSize is the registered memory a connection copies outgoing
	// bytes into until the transfer completes. Rounded up to a power of two
	// in [4 KiB, 1 GiB]; default RingSize.
	SendBufferSize int

	// SendDepth is the number of work requests the send queue holds;
	// [8, 4096], default 128. It is what a connection may grow to: the
	// connection's per-WR state (and on soft the QP's send slots) starts
	// at 8 slots, doubles while more WRs are outstanding and goes back to
	// 8 once the connection is quiet, so an idle connection holds a few
	// hundred bytes of it whatever SendDepth says.
	SendDepth int

	// RecvDepth is the number of receive work requests kept posted, which
	// bounds the messages in flight toward a connection; [8, 1023], default
	// 128. Its receive WRs are all alike (no buffer: data lands in the
	// ring), so on soft they take one slot of the QP, however many; the
	// ring of one-sided notifications is made on the first and grows up to
	// RecvDepth.
	RecvDepth int

	// InlineThreshold: writes of at most this many bytes are posted inline
	// (copied into the work request, no DMA read of a buffer), up to what the
	// device grants. Default 256; negative disables inline sends. The soft
	// provider sends nothing inline: it copies out of registered memory
	// either way, and inline would only cost a copy and staging per send WR.
	InlineThreshold int

	// KeepAlive is how often an idle connection probes its peer, so that a
	// peer that vanished silently is detected through the transport's retry
	// timeout. Default 2 s; negative disables the probe.
	KeepAlive time.Duration
	// PeerTimeout bounds how long the peer's connection may go without
	// a sign of life before the connection fails. A peer whose process is
	// paused (SIGSTOP, a debugger's breakpoint, a frozen container, a VM
	// or swap stall) or wedged goes on acknowledging the transport (its
	// kernel or NIC does, and on soft the peer's kernel or, on shared
	// memory, its live process stands for the NIC), so neither the
	// transport nor KeepAlive ends its connection: without a PeerTimeout
	// it waits for the peer to run again, however long, as a TCP
	// connection does. A peer that dies is found by the transport
	// whatever PeerTimeout is (its kernel closes its connections; a host
	// that vanished stops acknowledging, and KeepAlive's probe then fails
	// after the transport's retries).
	//
	// With PeerTimeout set, when the peer has sent nothing for a fifth of
	// it, the connection sends it a ping, which the peer's connection
	// answers (whether or not its program reads); any message counts as
	// an answer, so a connection with traffic sends none. A peer silent
	// for PeerTimeout is declared unresponsive at the next of the watch's
	// ticks, a fifth of PeerTimeout apart (so by about PeerTimeout*6/5
	// after its last message: 12.1-12.3 s after a SIGSTOP with 10 s in
	// the Soft-RoCE VM), never before PeerTimeout. Reads and Writes then
	// fail with a *net.OpError whose Err says "peer unresponsive for
	// <PeerTimeout>" and matches syscall.ETIMEDOUT with errors.Is; its
	// Timeout() is false, as for every failure of the connection (a
	// deadline's error is the one that is a timeout): a loop that retries
	// timeouts must not spin on a dead connection. The peer is sent a
	// disconnect: a paused peer that runs again finds its connection
	// reset ("connection reset by peer", syscall.ECONNRESET), this side's
	// verdict. A pause shorter than PeerTimeout costs nothing, and a side
	// that was itself paused does not count its own pause against its
	// peer (its timers came late: it looks again). A peer of an older
	// version, which announced no heartbeats in the handshake, is not
	// pinged and not held to it (only KeepAlive watches it). At least
	// 100 ms.
	//
	// Default 0: no heartbeat of its own, TCP's behaviour (a negative
	// value means the same, as it did when 10 s was the default). Neither
	// net/http nor gRPC ends a connection whose peer is merely paused
	// unless told to: net/http's connections are TCP's, whose keepalive
	// the peer's kernel answers, and gRPC's keepalive pings, which the
	// peer's process must answer, are off on the client and come after 2
	// hours of idleness on the server. Programs bound a wait with
	// deadlines (SetDeadline), and set PeerTimeout where a hung peer must
	// cost no more than that. Every connection answers its peer's pings,
	// whatever its own PeerTimeout. With Wire "rsocket" it does not apply:
	// rsocket's protocol has no heartbeat, and an RsocketConn has only its
	// keepalive.
	PeerTimeout time.Duration

	// PollTime is how long a Read or Write that would block busy-polls the
	// completion queue on its own goroutine before it sleeps on the
	// completion channel: a peer that answers within it is seen without a
	// sleep and a wake-up. The poll stretches to up to 8x PollTime for a
	// peer whose answers have come that soon (a round trip a little longer
	// than PollTime is then caught too). A connection whose waits keep
	// outlasting it stops polling (an idle connection costs no CPU) and
	// tries again every 16th wait, polling on while the peer answers within
	// it. Zero means
	// 50 us (rsockets polls 10 us; on rdmacore completions arrive by DMA).
	// Soft's completions come from the transport that the waiting caller
	// reads itself: on its TCP path the caller polls the socket, and only
	// in a wait for an answer (the connection has sent data since it last
	// received any, and the caller is not a Write waiting for room), where
	// a stream's reader would only read in smaller pieces; its
	// shared-memory reader spins by its own rule. Negative: never poll.
	// The rsocket wire polls the same way.
	PollTime time.Duration

	// BusyPoll makes a Read or Write that waits poll the completion queue
	// until what it waits for arrives, never sleeping: the lowest latency,
	// for a CPU kept busy by every waiting goroutine, as rsockets'
	// nonblocking loops (rstream's default) and DPDK-style servers do. Use
	// it where cores are dedicated to the connection; PollTime is then
	// ignored. Deadlines, Close and failures end the wait as usual. It
	// applies on rdmacore, where completions arrive by DMA, on both wires;
	// soft ignores it (its completions come from a transport that the
	// waiting caller reads itself). The RDMA_BUSY_POLL environment variable
	// (BusyPollEnv) set to 1 turns it on for Configs that leave it off.
	BusyPoll bool

	// HandshakeTimeout bounds how long a listener waits for an incoming
	// connection to become established after its request arrived, and how
	// long Close waits for outstanding sends to drain. Default 10 s.
	HandshakeTimeout time.Duration

	// RDMAOnly turns off the soft side of a listener on a host with an RDMA
	// device: by default such a listener accepts, on the same ip:port, both
	// rdmacore connections (RDMA CM port space) and soft ones (a TCP
	// listener on that port) from peers without a device. A listener whose
	// provider is soft ignores it. See the package doc, "Mixed fleets".
	RDMAOnly bool

	// RDMAConnectTimeout bounds the rdmacore attempt of a dial whose
	// provider is auto on a host with an RDMA device: if the peer has not
	// answered over the RDMA connection manager by then, the dial falls back
	// to soft. A peer that answers that nothing listens there (or an address
	// no RDMA device reaches) makes it fall back at once. Default 1.5 s;
	// negative disables the fallback (such dials use rdmacore only).
	RDMAConnectTimeout time.Duration

	// TrafficClass is the IP type of service (on RoCE the GRH traffic
	// class; the DSCP is its top six bits) that the connection's packets
	// carry: rdma_set_option(RDMA_OPTION_ID_TOS) on rdmacore, the TCP
	// socket's IP_TOS (IPV6_TCLASS) on soft. A dialer sets it before it
	// resolves the route; a listener on each connection it accepts (on
	// RoCE the route, and so the class, follows the dialing side's). 0
	// leaves the system's default; values are clamped to [0, 255]. Wire
	// "rdma" only (rsocket mode leaves it alone).
	// Conn.TrafficClass reads back what the connection got.
	TrafficClass int

	// RendezvousThreshold: a Write of at least this many bytes from a
	// Buffer (AllocBuffer) moves them by rendezvous, without a copy: the
	// peer RDMA READs them from the Buffer, straight into its Read's slice
	// when that lies in a Buffer too (docs/design.md, "When a Write
	// copies"). The Write returns once the peer has read them all. Default
	// 128 KiB, and on the soft provider 512 KiB (its transport copies the
	// bytes either way, so below that a copy costs less than the
	// rendezvous' round trips). Values below 64 KiB are raised to it;
	// negative: never (every Write copies). Only toward a peer of protocol
	// version 4 or later.
	RendezvousThreshold int
}

const (
	defaultRingSize        = 1 << 20
	minRingSize            = 4 << 10
	maxRingSize            = 1 << 30
	defaultSendDepth       = 128
	defaultRecvDepth       = 128
	maxSendDepth           = 4096
	maxRecvDepth           = stream.MaxRecvDepth
	minDepth               = stream.MinRecvDepth
	defaultInline          = 256
	defaultKeepAlive       = 2 * time.Second
	defaultHandshakeTimout = 10 * time.Second

	defaultRDMAConnectTimeout = 1500 * time.Millisecond
)

// withDefaults returns a copy of c (nil: the zero Config) with every field
// filled in and clamped.
func (c *Config) withDefaults() Config {
	var r Config
	if c != nil {
		r = *c
	}
	r.RingSize = pow2Clamp(positive(r.RingSize, defaultRingSize), minRingSize, maxRingSize)
	r.SendBufferSize = pow2Clamp(positive(r.SendBufferSize, r.RingSize), minRingSize, maxRingSize)
	r.SendDepth = clamp(positive(r.SendDepth, defaultSendDepth), minDepth, maxSendDepth)
	r.RecvDepth = clamp(positive(r.RecvDepth, defaultRecvDepth), minDepth, maxRecvDepth)
	switch {
	case r.InlineThreshold == 0:
		r.InlineThreshold = defaultInline
	case r.InlineThreshold < 0:
		r.InlineThreshold = 0
	case r.InlineThreshold > 1024:
		r.InlineThreshold = 1024
	}
	r.KeepAlive = cmp.Or(r.KeepAlive, defaultKeepAlive) // negative: off
	if r.PeerTimeout > 0 {
		r.PeerTimeout = max(r.PeerTimeout, stream.MinTimeout)
	}
	r.HandshakeTimeout = positive(r.HandshakeTimeout, defaultHandshakeTimout)
	r.TrafficClass = clamp(r.TrafficClass, 0, 255)
	r.RDMAConnectTimeout = cmp.Or(r.RDMAConnectTimeout, defaultRDMAConnectTimeout) // negative: no fallback
	return r
}

// defaultPollTime is PollTime's default on both providers. On soft's TCP
// path (rdmaperf, 3 interleaved rounds, medians) 10, 20 and 50 us gave
// the same 64 B and 4 KiB round trips (7.6 and 10.1-10.3 us p50), and 50
// us the most 1 MiB from and into Buffers (6431, 6633 and 6946 MiB/s) and
// of four connections' round trips at once (115k, 121k and 123k a second).
const defaultPollTime = 50 * time.Microsecond

// BusyPollEnv is the environment variable that, set to 1, turns
// Config.BusyPoll on (for programs that cannot set it: librdma.so's).
const BusyPollEnv = "RDMA_BUSY_POLL"

// busyPoll reports whether connections with this Config busy-poll.
func (c *Config) busyPoll() bool {
	return c.BusyPoll || os.Getenv(BusyPollEnv) == "1"
}

// pollTime is PollTime for a connection.
func (c *Config) pollTime() time.Duration {
	switch {
	case c.PollTime < 0:
		return 0
	case c.PollTime > 0:
		return c.PollTime
	}
	return defaultPollTime
}

// positive is v if it is positive, else def.
func positive[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

// pow2Clamp rounds v up to a power of two within [lo, hi] (both powers of two).
func pow2Clamp(v, lo, hi int) int {
	v = clamp(v, lo, hi)
	return 1 << bits.Len(uint(v-1))
}
