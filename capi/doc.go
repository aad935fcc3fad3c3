// Package capi is the Go mirror of the original rdma_lib's C interface,
// rdma_lib.h: a Context that is either a server (it listens and accepts
// peers) or a client (it connects to peers), numbered peers, whole-message
// Send and Recv, and two collectives, Broadcast and SequentialAllToAll.
//
// Package capi/clib builds the same API as a C shared library (librdma.so
// with rdma_lib.h); it is a thin layer over this package.
//
// Connections are rdma conns (package rdma: rdma.Listen on the server,
// rdma.Dialer on clients). On them every message is framed by a 4-byte
// big-endian length, so message boundaries survive the byte stream: one Send
// is exactly one Recv on the other side.
//
// Semantics, as in the original rdma_lib and docs/design.md:
//   - A server context listens on ip:port from Init on (port 0 picks a free
//     port, see Addr); a client context uses ip as the source address of its
//     connections and ignores port, so several clients and a server can share
//     one host through different loopback addresses.
//   - Peers are numbered from 0 in the order their connections complete
//     (ConnectPeer or AcceptPeer). A context has at most MaxPeers peers over
//     its lifetime: a disconnected peer keeps its index, which is never reused.
//   - bufSize bounds every message the context sends; a longer Send fails
//     with ErrMessageTooLong.
//   - Recv of a message longer than its buffer fails with ErrMessageTooLong
//     and leaves the message queued, so a retry with a big enough buffer
//     gets it.
//
// Recovery: a peer whose connection fails (it died, or closed its end) is
// gone. Calls on it fail with ErrPeerGone; the context's other peers go on
// (Broadcast still reaches them, SequentialAllToAll leaves a client that
// fails during the exchange out). ReconnectPeer (a client) and AcceptPeerAt
// (a server) give the index of a gone or disconnected peer a new
// connection.
//
// Beyond the original API: asynchronous ISend and IRecv (requests with Wait,
// Test and WaitAny, in posting order per peer and direction, cancelled by
// Close), and the collectives package's operations over a context's peers
// (GroupInit, then Barrier, Bcast, AllGather, AllReduce, Reduce), and
// one-sided RDMA write and read into memory a peer exposed (Alloc, Expose,
// Write, WriteNotify, Read, WaitNotify, IWrite, IRead; see onesided.go),
// and a traffic class for the context's connections (SetTrafficClass,
// TrafficClass; qos.go).
//
// A Context is safe for concurrent use: calls on different peers run in
// parallel, calls on one peer are serialized per direction.
package capi
