// Package stream is the protocol rdma.Conn speaks over an RDMA reliable
// connection, as plain values with no verbs and no goroutines: the
// handshake (hello and reject, carried in the connection manager's private
// data), the immediate data that says what each RDMA write with immediate
// carries, and the two windows that govern a direction of the byte stream
// (the receiver's ring and receive WRs, the sender's view of the peer's).
//
// The data path: the sender RDMA-writes bytes at the next position of the
// peer's receive ring, with immediate data saying how many; each such write
// consumes one receive WR at the peer. The receiver returns ring space and
// receive WRs in credit messages (zero-length writes with immediate data),
// a quarter window at a time. Everything a peer sends is checked here
// before the connection acts on it.
package stream
