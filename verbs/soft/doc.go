// Package soft is the pure-Go verbs provider, registered as "soft": a
// software RC NIC for machines without RDMA hardware. Import it for its side
// effect:
//
//	import _ "github.com/rdmanet/rdma/verbs/soft"
//
// It offers one device, soft0 (transport "soft"), with one ACTIVE port
// (Ethernet link layer, MTU 4096) and Soft-RoCE's limits: 32 SGEs, 16384 WRs
// per queue, 32767 CQEs, 256 bytes of inline data, 128 outstanding RDMA
// READs.
//
// An RC connection is one TCP connection at the RDMA address: a listening
// CM ID is a TCP listener at the same ip:port, dialed at rdma_resolve_route
// (connect.go: the TCP handshake overlaps the consumer's setup; nothing is
// sent before rdma_connect).
// The CM handshake (REQ, REP or REJ, RTU; wire.go) carries the private data
// and connection parameters; frames follow on the same connection. Anything
// on the port that is not a well-formed REQ within the handshake timeout is
// dropped (SetHandshakeTimeout). A connection takes one of the listener's
// handshake slots only once its whole request has arrived, and waits for
// one rather than being refused; one remote host holds at most a few of
// them (SetMaxHandshakes, SetMaxHandshakesPerHost), and at most a quarter
// of the connections that wait for their requests (admission.go).
//
// A QP without the CM (PD.CreateQP) is reached by (GID, LID, QP number)
// once its device has an address: Bind gives an opened device an IP
// address, which becomes its GID, and a listener there, whose TCP port is
// its LID. At RTR one of the two QPs dials the other's device and the
// other's listener answers only the peer its QP expects (manual.go).
// RegDmaBufMR maps a dma-buf where its exporter allows mmap.
//
// The provider behaves as hardware does where programs can tell: private
// data, SGE and inline limits; QP states; rkey, bounds and access checks on
// remote operations (REM_ACCESS_ERR, both QPs to ERR); RNR NAKs retried per
// rnr_retry and the responder's min RNR timer (7: forever); the transport
// retry timeout (ack timeout x retry count: RETRY_EXC_ERR); in-order
// completions; flushes after an error or a disconnect; CQ overruns.
//
// Data moves without copies through Go memory: a WR's SGEs are resolved to
// registered memory at post time and written with one writev per batch of
// frames (on the same-host path, copied into the shared ring, large
// payloads with non-temporal stores while those are the cheaper kind, as
// when the reader runs on another CPU: ntcopy.go); payloads are read
// straight into the target MR. Posting never
// blocks and, like polling, allocates nothing. A send WR completes when the
// peer's (coalesced) ACK arrives, so a completed RDMA WRITE is in the peer's
// memory. A goroutine waiting in CompChannel.GetEvent for the completions
// of a single QP reads that QP's connection itself, so that waking it costs
// no goroutine hand-off (engine.go); through GetEventSpin it first polls
// the TCP connection for a while, as the rdma package's Config.PollTime
// asks, so that an answer that comes within it costs no wake-up at all.
//
// The QP engine (engine.go) reaches the network only through the transport
// interface (transport.go), so that a same-host shared-memory transport can
// be chosen in the handshake beside TCP (tcp.go). A connection between two
// processes of one host starts on TCP and moves to shared memory once it
// has carried SetSharedMemorySwitch's bytes (default 64 KiB) or its
// dialing side has received SetSharedMemorySwitchFrames' frames (default
// 8), in the background, each direction at a frame boundary
// (shm_switch_linux.go).
//
// Security model, as on a NIC: a peer reads or writes only bytes inside
// MRs registered with the matching remote access, within bounds, and
// nothing after Dereg, Destroy or disconnect; memory used only as a send
// source is never reachable by the peer. On TCP the frames are the only
// input and every remote access is checked against the MR table. On the
// same-host path (shared memory, same effective uid only) the rings carry
// the same frames and nothing else: payloads are copied in and out, no
// application memory is shared. Every size a peer sends is bounded by a
// local limit before use, and every read of a peer during a handshake has
// a deadline. shm.go spells out the details; docs/security.md is the same
// model for the whole project.
package soft
