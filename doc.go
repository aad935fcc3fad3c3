// Package rdma makes RDMA ordinary Go networking: Dial and Listen return a
// net.Conn and a net.Listener carried by an RDMA reliable connection over
// pre-registered memory, so that anything written against net.Conn
// (hashicorp/yamux, net/http, gRPC, crypto/tls) runs over RDMA unchanged.
//
//	ln, err := rdma.Listen("rdma", "127.0.0.1:7471") // a net.Listener
//	c, err := rdma.Dial("rdma", "127.0.0.1:7471")    // a net.Conn
//	tr := &http.Transport{DialContext: (&rdma.Dialer{}).DialContext}
//
// The bytes move through the verbs API (package verbs) of one of two
// providers: "rdmacore" for real devices (InfiniBand, RoCE, iWARP,
// Soft-RoCE) through rdma-core, and "soft", a pure-Go emulation that runs
// anywhere, over TCP or, between two ends on one host (one process, or two
// of one user), over shared memory: a connection starts on TCP and moves
// there once it talks. Config.Provider picks one, else RDMA_PROVIDER, else
// rdmacore when a device has an active port and soft otherwise;
// Conn.Provider says which carries a connection.
//
// Beyond net.Conn:
//
//   - Zero copy: a Write of at least Config.RendezvousThreshold bytes from
//     a Buffer (AllocBuffer, NewBufferPool) is read by the peer where it
//     lies, and returns once the peer has read it: two ends that both
//     Write a Buffer before reading wait for each other for ever.
//   - One-sided operations: Conn.Expose, WriteRemote, WriteRemoteNotify,
//     ReadRemote, WaitNotify.
//   - Mixed fleets: a Listener on a host with a device accepts soft
//     connections too, and an auto dial falls back to soft (Conn.Fallback).
//   - rsockets: Config.Wire = "rsocket" speaks rdma-core's rsockets protocol.
//   - Statistics: Conn.Stats, OpenConnStats, ConnStatsPage,
//     ReadProcessStats; package rdmadebug serves them as a debug page, the
//     module promrdma as Prometheus metrics.
//   - Debug logs: RDMA_DEBUG=1 (WARN), 2 (INFO) or 3 (TRACE), and
//     RDMA_DEBUG_SUBSYS=dial,shm,ring,conn.
//
// The guide has the details of each
// (https://github.com/rdmanet/rdma/blob/main/docs/guide.md); the design
// says how it works and what it costs
// (https://github.com/rdmanet/rdma/blob/main/docs/design.md), and the
// security notes what a peer can and cannot do
// (https://github.com/rdmanet/rdma/blob/main/docs/security.md).
package rdma
