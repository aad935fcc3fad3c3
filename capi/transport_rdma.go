package capi

import (
	"context"
	"net"

	"github.com/rdmanet/rdma"
)

// rdmaTransport carries capi over rdma conns on the default provider
// (rdma.Config's Provider "": RDMA_PROVIDER, else auto).
var rdmaTransport = transport{
	name: "rdma",
	listen: func(address string) (net.Listener, error) {
		return rdma.Listen(rdma.Network, address)
	},
	dial: func(ctx context.Context, local net.IP, address string, tc int) (net.Conn, error) {
		d := rdma.Dialer{LocalAddr: &rdma.Addr{IP: local}, Config: &rdma.Config{TrafficClass: tc}}
		return d.DialContext(ctx, rdma.Network, address)
	},
	setTrafficClass: func(ln net.Listener, tc int) error {
		return ln.(*rdma.Listener).SetTrafficClass(tc)
	},
}
