// Package onesided holds what one-sided RDMA (writes and reads into memory a
// peer exposed) needs between the packages that provide and use it: the
// descriptor of an exposed region, as it travels between peers (a wire
// format with no verbs and no goroutines, checked on every parse), and the
// seam through which package capi reaches the queue pair of an rdma.Conn.
package onesided
