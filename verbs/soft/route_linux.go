package soft

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// routeSource returns the source address the kernel's route to dst picks,
// by connecting a UDP socket (which sends nothing). The socket is a raw
// descriptor, never registered with the runtime poller: a UDP connect does
// not block, and net.DialUDP's poller registration, address objects and
// finaliser cost more than the lookup itself on every dial.
func routeSource(dst *net.TCPAddr) (net.IP, error) {
	if dst.Zone != "" {
		// A link-local destination: net resolves the zone's index.
		u, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: dst.IP, Port: dst.Port, Zone: dst.Zone})
		if err != nil {
			return nil, err
		}
		defer u.Close()
		return u.LocalAddr().(*net.UDPAddr).IP, nil
	}
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip4 := dst.IP.To4(); ip4 != nil {
		s := &unix.SockaddrInet4{Port: dst.Port}
		copy(s.Addr[:], ip4)
		sa = s
	} else {
		family = unix.AF_INET6
		s := &unix.SockaddrInet6{Port: dst.Port}
		copy(s.Addr[:], dst.IP.To16())
		sa = s
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return nil, err
	}
	local, err := unix.Getsockname(fd)
	if err != nil {
		return nil, err
	}
	switch a := local.(type) {
	case *unix.SockaddrInet4:
		return net.IP(append([]byte(nil), a.Addr[:]...)), nil
	case *unix.SockaddrInet6:
		return net.IP(append([]byte(nil), a.Addr[:]...)), nil
	}
	return nil, unix.EAFNOSUPPORT
}

// bindAddressOnly sets IP_BIND_ADDRESS_NO_PORT on a socket about to be
// bound to an address with port 0 and then connected: the kernel picks
// the port at connect, unique for the whole 4-tuple, instead of at bind,
// unique for the address alone. Without it a host's connections from one
// source address share one port range with every socket in TIME_WAIT
// there, and the bind fails after some 14,000 of them.
func bindAddressOnly(rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
