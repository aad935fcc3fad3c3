// Package rsocket is the wire format and protocol state of rdma-core's
// rsockets (librdmacm/rsocket.c, SOCK_STREAM), so that this module can talk
// to C programs that use rsockets directly (rstream, riostream) or through
// LD_PRELOAD=librspreload.so. It has no verbs and no goroutines: the root
// package's rsocket conn feeds it completions and posts what it decides.
//
// The protocol, as rsocket.c runs it over an RC queue pair set up by the
// RDMA connection manager:
//
//   - Each side registers a receive buffer (rbuf) and a target SGL of
//     SGLSize entries, both remotely writable. The connect private data
//     (ConnData, big-endian) carries the receive depth as the initial
//     message credit, the target SGL's address, key and entry count, and the
//     first half of the rbuf.
//   - Data goes as RDMA WRITE WITH IMMEDIATE into the region at the head of
//     the sender's target SGL; the immediate (big-endian on the wire,
//     decoded by the verbs layer) is Msg(OpData, length). The receiver
//     consumes its rbuf in order, so regions are granted in order, one half
//     of the rbuf at a time.
//   - The receiver returns credit with Msg(OpSGL, rseq+rqSize): the sender
//     may have sent data messages up to that 16-bit sequence number. When a
//     half of the rbuf is free the same write carries a 16-byte SGE that
//     lands in the next entry of the sender's target SGL, in the byte order
//     the sender announced (flag FlagNet: big-endian, else little-endian).
//   - Control messages (Msg(OpCtrl, CtrlShutdown/CtrlDisconnect)) are
//     zero-length writes with immediate; a keepalive is a zero-length RDMA
//     WRITE without immediate. At most CtrlSlots credit and control messages
//     are outstanding; data may use the rest of the send queue.
//
// iomap (riomap/riowrite) and the iWARP variant (messages as SENDs) are not
// implemented: this side announces no iomap and never uses RDMA reads.
package rsocket
