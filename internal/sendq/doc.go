// Package sendq holds rdma.Conn's send path as parts that own their
// state: Queue, the send queue (WR ids, slots that grow, signaling, room);
// Buffer, the send staging ring (positions, reserve, post, retire); Op,
// a one-sided operation waiting in a slot for its completion. They do no
// I/O and take no lock: the connection calls them under its mu.
package sendq
