package rdma

import "net"

func opError(op string, src, dst net.Addr, err error) error {
	return &net.OpError{Op: op, Net: Network, Source: src, Addr: dst, Err: err}
}
