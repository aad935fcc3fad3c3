// Package hostaddr answers whether an IP address is this host's, for the
// soft provider (which addresses it may bind, and whether a peer may share
// memory with it), and which uid owns a TCP socket of this host: both for
// rdma.Conn's reason why a connection is not on shared memory.
package hostaddr

import "net"

// Local reports whether ip is an address of this host: unspecified,
// loopback, or an address of one of its interfaces.
func Local(ip net.IP) bool {
	if ip.IsUnspecified() || ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
