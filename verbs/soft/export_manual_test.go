package soft

import "github.com/rdmanet/rdma/verbs"

// RawQPHello is the hello a dialing QP sends a device's listener: what a
// hostile client of that listener can put on the wire.
func RawQPHello(dst, src uint32, lid uint16, gid verbs.GID) []byte {
	m := qpHelloMsg{typ: qpHello, dst: dst, src: src, lid: lid, gid: gid, sqDepth: 16, rqDepth: 16}
	return m.marshal()
}

// AcceptAnyFd makes RegDmaBufMR take any descriptor it can map, as if it
// were a dma-buf, until the returned function is called.
func AcceptAnyFd() (restore func()) {
	prev := dmaBufCheck
	dmaBufCheck = func(int) bool { return true }
	return func() { dmaBufCheck = prev }
}
