// Package onesided holds what one-sided RDMA (writes and reads into memory a
// peer exposed) needs between package rdma, which performs it on a Conn,
// and package capi, which offers it to C: the descriptor of an exposed
// region, as it travels between peers (a wire format with no verbs and no
// goroutines, checked on every parse), and the errors both report. It also
// holds the parts of a connection's one-sided state that own their rules
// and do no I/O: Exposures, the ranges it exposed to the peer by number,
// and NoteQueue, the peer's notifications held until the program takes
// them. The connection guards both with its lock.
package onesided
