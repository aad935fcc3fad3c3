// Package rdma makes RDMA ordinary Go networking: Dial and Listen return a
// net.Conn and a net.Listener carried by an RDMA reliable connection (an RC
// queue pair) over pre-registered memory, so that anything written against
// net.Conn (hashicorp/yamux, net/http, gRPC, crypto/tls) runs over RDMA
// unchanged.
//
// The bytes move through the verbs API (package verbs) of whichever provider
// is chosen: "rdmacore" for real devices (InfiniBand, RoCE, iWARP, Soft-RoCE)
// and "soft", a pure-Go emulation over TCP that runs anywhere. Config.Provider
// picks one, else the RDMA_PROVIDER environment variable, else the automatic
// choice: rdmacore when a device with an active port exists, soft otherwise.
// Conn.Provider says which carries a connection.
//
// # Wire protocol
//
// Each side of a connection registers a receive ring (remote-writable; 64
// KiB, growing to Config.RingSize once the peer streams into it: the
// receiver offers the larger ring, and the sender's next write goes there)
// and tells the peer its address, rkey and size in the
// connection manager's private data, together with a protocol version and the
// number of receive work requests it keeps posted (a versioned, checksummed
// 32-byte hello; a malformed one is a rejected connect). A Write copies the
// caller's bytes into a registered send buffer (or, when small, posts them
// inline) and RDMA-writes them with immediate data into the next free bytes
// of the peer's ring; the immediate value says how many bytes landed. The
// ring is consumed strictly in order, so no offsets travel.
//
// Flow control is by credit, as in rsocket: a sender may use as much of the
// peer's ring as the peer has freed, and as many messages as the peer has
// receives posted. The receiver returns both kinds in one zero-length RDMA
// write with immediate, in batches (once a quarter of either window is owed);
// the last message credit is only ever spent on such an update, so two
// senders can never starve each other. A sender waits for room for a whole
// chunk rather than post slivers (silly window avoidance).
//
// Sends are unsignaled but for one in every few and every one posted while
// resources run low; they are built under the connection's lock and posted
// outside it, in order, so that a slow post never holds up completion
// processing. Completions are polled in batches into a reused array. A
// half-close travels as a FIN control message, so that the peer reads
// everything sent before it and then io.EOF. An idle connection posts a
// zero-length RDMA write every Config.KeepAlive, so that a peer that died
// silently is detected through the transport's retry timeout; one whose
// process is stopped or wedged, which its kernel keeps acknowledging, keeps
// its connection, as over TCP, unless Config.PeerTimeout is set: then a
// heartbeat its connection answers finds it. A peer
// that breaks any of these rules gets its connection failed with a protocol error.
//
// # Zero copy
//
// AllocBuffer gives memory outside the Go heap that every Conn can register.
// A Write of at least Config.RendezvousThreshold bytes (128 KiB; on soft 512
// KiB) from a Buffer is not copied:
// the writer exposes exactly those bytes to its peer for remote READ,
// announces them in the stream's order, and the peer RDMA READs them,
// straight into its Read's slice when that lies in a Buffer too; the Write
// returns once the peer has read them all, and their exposure is revoked
// before it does (protocol version 4; an older peer gets copies). io.Copy to and from a Conn skips its intermediate buffer
// (Conn.ReadFrom reads into the send buffer, Conn.WriteTo writes out of
// the receive ring). docs/design.md, "When a Write copies", says what
// copies where, with measurements.
//
// # One-sided operations
//
// A Conn also carries RDMA's own operations, beside its byte stream and on
// the same queue pair. Conn.Expose registers a range of a Buffer on the
// connection for its peer, with AccessRead, AccessWrite or both, and
// returns a Desc: 32 bytes (address, length, rkey, access, a number) to
// send the peer, typically over the connection itself. The peer then
// moves bytes between its own Buffers and that range without this side
// taking part: Conn.WriteRemote (RDMA WRITE), Conn.ReadRemote (RDMA READ),
// and Conn.WriteRemoteNotify, an RDMA WRITE WITH IMMEDIATE whose value
// this side's Conn.WaitNotify returns once the bytes have landed. Each
// call returns once its work request has completed; a Go program keeps
// several in flight with goroutines. Conn.Unexpose, Buffer.Free and Close
// end an exposure, and once they return nothing of the peer's reaches the
// range, not even an access it had under way.
//
// A Desc is a claim, not a capability: the range is registered on this
// connection's own protection domain, so no other connection can reach
// it, and the exposing side's device checks every access's rkey, bounds
// and rights. A Desc is checked locally first (form, access, bounds), so
// mistakes fail with ErrBadDesc and break nothing; an access the device
// refuses fails with ErrRemoteAccess and, as on any RDMA device, breaks
// that connection on both sides. docs/design.md, "One-sided operations",
// has the details and measurements; examples/filexfer the classic
// program (a receiver exposes a Buffer, the sender writes a file into it
// and notifies, the receiver checks its hash).
//
// # Mixed fleets
//
// Hosts with and without RDMA devices serve each other. A Listener on a host
// with a device listens twice on the same ip:port: in the RDMA connection
// manager's port space (rdmacore) and on TCP (soft), and hands both kinds of
// connection out through one Accept; Config.RDMAOnly leaves the soft side
// out. A Dialer whose provider is auto, on a host with a device, tries
// rdmacore first and falls back to soft when the peer does not answer over
// the RDMA connection manager: at once when it answers that nothing listens
// there or no RDMA device reaches it, after Config.RDMAConnectTimeout
// (default 1.5 s) when it stays silent. A listener that answers and refuses
// is not second-guessed. A peer that answered only on soft is remembered
// for a minute (per process, at most 1024 peers), and repeat dials to it go
// to soft at once; a mixed listener's soft side tells the dialer that it
// has an RDMA side too, and the dialer then forgets it, so that later dials
// use the RDMA connection manager. Conn.Provider says what carries a
// connection and Conn.Fallback why a dial fell back.
//
// # Talking to rsockets
//
// With Config.Wire = "rsocket" (or RDMA_WIRE=rsocket) Dial and Listen speak
// rdma-core's rsockets protocol (librdmacm's rsocket.c, SOCK_STREAM) instead
// of the one above, and their conns are *RsocketConn: the peer may be a C
// program on the rsocket API (rstream, riostream) or any TCP program run
// with LD_PRELOAD=librspreload.so, in either role. The handshake is
// rsocket's rs_conn_data (version 1, big-endian); data goes as RDMA WRITE
// WITH IMM into the half of the peer's receive buffer it granted through the
// target SGL; credit, SGL updates, SHUTDOWN (CloseWrite), DISCONNECT
// (Close) and keepalives follow rsocket.c, and so do its defaults: 128 KiB
// receive and send buffers, 384-deep queues, 64 bytes inline (the Config
// size fields override them). The conn behaves as Conn does (deadlines,
// net.ErrClosed, io.EOF after the peer's shutdown, close or disconnect),
// and its Reads and Writes poll as Conn's do (Config.PollTime, BusyPoll).
//
// Limits: no iomap (riomap/riowrite; the connection announces none) and
// no iWARP (rsocket sends messages as SENDs there, e.g. on siw); RoCE and
// InfiniBand devices through rdmacore, and soft, which carries the same
// protocol between two Go programs without a NIC (C rsockets need a
// kernel RDMA device). The two wire protocols do not mix: both ends must
// set the same Wire, and a Listener speaks one. Mixed fleets work as
// above: an rsocket Listener on a host with a device also accepts soft
// connections from Go peers in rsocket mode, and an auto dial falls back
// to soft (which reaches Go listeners only, never a C one); rsocket dials
// do not use the memory of soft-only peers. A C rsockets
// reader blocked in poll or recv does not notice its peer's death (a
// killed C peer no more than a killed Go one); the Go side reads EOF when
// a C peer dies.
//
// No OS thread waits per connection. Completions are driven by the Read or
// Write that needs them, on its own goroutine: it polls the completion
// queue, busy-polls briefly (Config.PollTime; Config.BusyPoll polls without
// ever sleeping), then sleeps on the completion channel: on rdmacore first
// with its own thread blocked in the kernel, as C's blocking mode does, for
// at most 20 ms and by at most RDMA_DIRECT_WAITS (4) waits in the process
// at once, then parked on Go's runtime poller; a concurrent Read and Write
// share that role. A connection's one goroutine of its own waits
// on the connection manager's event channel (also on the poller) and sends
// the keepalive. Steady-state Read and Write allocate nothing.
//
// # Statistics and debug logs
//
// Conn.Stats and RsocketConn.Stats return a ConnStats: what the connection
// did and its sizes now. The counters:
//
//   - BytesSent, BytesReceived: bytes Write accepted and Read returned.
//   - MessagesSent, MessagesReceived: data writes on the wire (RDMA WRITE
//     WITH IMMEDIATE carrying stream bytes). A Write of up to a chunk (a
//     quarter of the peer's ring and of the send buffer, at most 1 MiB)
//     that does not cross the end of the peer's ring is one; a longer one
//     is several. One side's MessagesSent is the other's MessagesReceived.
//   - Writes, Reads: calls that moved at least a byte.
//   - Provider, Path, Wire: "soft" or "rdmacore"; "rdmacore", "soft-shm" or
//     "soft-tcp" (soft may move a connection to shared memory after its
//     handshake); "stream" or "rsocket".
//   - RingSize, PeerRingSize, SendBufferSize: our receive ring, the
//     peer's, our send buffer, in bytes; they start at 64 KiB and grow once
//     a connection streams: RingGrowths, SendBufferGrowths count the moves.
//     QueueTrims counts an idle connection giving its send queue slots back.
//   - SendDepth, RecvDepth, SendsPending, RecvsPosted, Credits, Buffered,
//     SendBuffered: the queues' depths and what is in them now.
//   - CreditWaits, RingWaits, SendBufferWaits: times a Write waited for a
//     message credit or send queue slot, for room in the peer's ring (it
//     reads slower than we write), for send buffer room (completions lag);
//     WriteWaitTime: how long Writes waited in all.
//   - ReadsAtOnce, ReadsHanded, ReadsSpun, ReadsSlept: Reads that found
//     data there, got it from another caller's poll, caught it by busy-
//     polling, or slept on the completion channel first; ReadWaits counts
//     the waits. Spins, SpinsCaught, Sleeps: the poll role's busy-polls,
//     those that caught a completion, its sleeps (any caller's).
//   - KeepAlives, PingsSent, PongsRecv, PingsRecv, PongsSent: the idle
//     keepalive probes and the heartbeat (Config.PeerTimeout) both ways.
//   - SinceSent, SinceRecv: since a message was last seen going each way,
//     to within LastSeenStep (the watch's period; no clock is read per
//     message); -1 when none has.
//   - Fallback, Err: why an auto dial fell back to soft, why the
//     connection failed (not the reset that follows the peer's close).
//   - RemoteWrites, RemoteReads, RemoteBytesWritten, RemoteBytesRead: the
//     one-sided operations that succeeded (WriteRemote and
//     WriteRemoteNotify; ReadRemote) and their bytes; NotifiesSent,
//     NotifiesReceived: WriteRemoteNotify calls, and the notifications
//     WaitNotify returned; Exposures: Expose calls, Exposed: the ranges
//     exposed now.
//
// OpenConnStats lists the open connections, ReadProcessStats sums every
// connection the process has had (ConnTotals), reads the RDMA device
// ports' counters and hw_counters from sysfs (DeviceCounters), and the
// soft provider's engine counters (soft.Counters: RNR NAKs sent and
// received, retransmits after them, transport timeouts and retries
// exceeded, its listeners' admission waits, parkings, evictions and drops,
// and shared-memory offers accepted and refused). Package
// rdmadebug serves them over HTTP and as the expvar variable "rdma", module
// promrdma as Prometheus metrics.
//
// RDMA_DEBUG=WARN, INFO or TRACE turns on debug logs through log/slog (to
// stderr, or SetDebugLogger's), and RDMA_DEBUG_SUBSYS picks subsystems:
// dial (the provider chosen and why, each connection's provider, device
// and path, a fallback and its reason), shm (shared memory used or not, and
// why as far as this side can tell: a peer on another host or of another
// uid), ring (ring and send buffer growth), conn (a failure and its cause);
// a comma-separated list, ALL, or ^list for all but those. Off, each place
// that could log tests one atomic word.
package rdma
