// Package onesided holds what one-sided RDMA (writes and reads into memory a
// peer exposed) needs between package rdma, which performs it on a Conn,
// and package capi, which offers it to C: the descriptor of an exposed
// region, as it travels between peers (a wire format with no verbs and no
// goroutines, checked on every parse), and the errors both report.
package onesided
