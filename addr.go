package rdma

import (
	"net"
	"net/netip"
	"strconv"
)

// Network is the name of the network this package serves. "rdma4" and
// "rdma6" restrict addresses to IPv4 and IPv6; "tcp", "tcp4" and "tcp6" are
// accepted as aliases of the three, so that Dialer.DialContext plugs into code
// that always asks for "tcp" (net/http's Transport, for one).
const Network = "rdma"

// Addr is the address of an RDMA endpoint: the IP address of an RDMA-capable
// interface (or, for the soft provider, any interface) and a port in the RDMA
// connection manager's TCP port space.
type Addr struct {
	IP   net.IP
	Port int
	Zone string // IPv6 scoped addressing zone
}

// Network returns "rdma".
func (a *Addr) Network() string { return Network }

// String returns host:port, with IPv6 hosts in brackets, as net.TCPAddr does.
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	ip := ""
	if len(a.IP) != 0 {
		ip = a.IP.String()
	}
	if a.Zone != "" {
		ip += "%" + a.Zone
	}
	return net.JoinHostPort(ip, strconv.Itoa(a.Port))
}

// AddrPort returns the address as a netip.AddrPort.
func (a *Addr) AddrPort() netip.AddrPort {
	if a == nil {
		return netip.AddrPort{}
	}
	ip, _ := netip.AddrFromSlice(a.IP)
	ip = ip.Unmap().WithZone(a.Zone)
	return netip.AddrPortFrom(ip, uint16(a.Port))
}

// tcpAddr is the form the verbs connection manager takes.
func (a *Addr) tcpAddr() *net.TCPAddr {
	if a == nil {
		return nil
	}
	return &net.TCPAddr{IP: a.IP, Port: a.Port, Zone: a.Zone}
}

// netAddr is a as a net.Addr: nil, not a nil *Addr, when a is nil.
func (a *Addr) netAddr() net.Addr {
	if a == nil {
		return nil
	}
	return a
}

func fromTCPAddr(t *net.TCPAddr) *Addr {
	if t == nil {
		return nil
	}
	return &Addr{IP: t.IP, Port: t.Port, Zone: t.Zone}
}

// ResolveAddr parses address ("host:port", the host a name or a literal) into
// an Addr, as net.ResolveTCPAddr does. network is "rdma", "rdma4", "rdma6" or
// one of their "tcp" aliases; anything else is a net.UnknownNetworkError.
func ResolveAddr(network, address string) (*Addr, error) {
	tcpNet, err := tcpNetwork(network)
	if err != nil {
		return nil, err
	}
	t, err := net.ResolveTCPAddr(tcpNet, address)
	if err != nil {
		return nil, err
	}
	return fromTCPAddr(t), nil
}

// tcpNetwork maps an accepted network name to the TCP network whose address
// rules it follows.
func tcpNetwork(network string) (string, error) {
	switch network {
	case "rdma", "tcp":
		return "tcp", nil
	case "rdma4", "tcp4":
		return "tcp4", nil
	case "rdma6", "tcp6":
		return "tcp6", nil
	}
	return "", net.UnknownNetworkError(network)
}

// toTCPAddr converts the net.Addr forms a caller may give as a local address.
func toTCPAddr(a net.Addr) (*net.TCPAddr, error) {
	switch a := a.(type) {
	case nil:
		return nil, nil
	case *Addr:
		return a.tcpAddr(), nil
	case *net.TCPAddr:
		return a, nil
	}
	return nil, &net.AddrError{Err: "unexpected address type", Addr: a.String()}
}
