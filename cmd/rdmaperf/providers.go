package main

// The rdma package registers only the software provider; rdmaperf also
// carries rdma-core's, so that -provider rdmacore (and auto) drive a real
// device where there is one. Built without cgo, it is a stub that says so.
import _ "github.com/rdmanet/rdma/verbs/rdmacore"
