package capi

import (
	"context"
	"net"
	"strconv"
	"time"
)

// DialTimeout bounds ConnectPeer, so that a client never waits forever for a
// server that is not there.
const DialTimeout = 10 * time.Second

// transport is the seam between capi and what carries its connections: rdma
// conns in production, TCP loopback in tests that compare the two.
type transport struct {
	name   string
	listen func(address string) (net.Listener, error)
	// dial connects to address from the source IP local, with traffic
	// class tc (0: the default).
	dial func(ctx context.Context, local net.IP, address string, tc int) (net.Conn, error)
	// setTrafficClass sets the traffic class of the connections ln
	// accepts from now on; nil when the transport has none.
	setTrafficClass func(ln net.Listener, tc int) error
}

// tcpTransport carries capi over plain TCP; tests use it as the baseline.
var tcpTransport = transport{
	name: "tcp",
	listen: func(address string) (net.Listener, error) {
		return net.Listen("tcp", address)
	},
	dial: func(ctx context.Context, local net.IP, address string, _ int) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}
		return d.DialContext(ctx, "tcp", address)
	},
}

// connect dials address from the source IP local with traffic class tc,
// giving up after DialTimeout.
func (tr transport) connect(local net.IP, address string, tc int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	return tr.dial(ctx, local, address, tc)
}

// defaultTransport is what Init uses: rdma conns.
var defaultTransport = rdmaTransport

func joinHostPort(ip net.IP, port int) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(port))
}
