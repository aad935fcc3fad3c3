//go:build !linux

package soft

import (
	"net"
	"syscall"
)

// routeSource returns the source address the kernel's route to dst picks,
// by connecting a UDP socket (which sends nothing).
func routeSource(dst *net.TCPAddr) (net.IP, error) {
	u, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: dst.IP, Port: dst.Port, Zone: dst.Zone})
	if err != nil {
		return nil, err
	}
	defer u.Close()
	return u.LocalAddr().(*net.UDPAddr).IP, nil
}

// bindAddressOnly does nothing here: IP_BIND_ADDRESS_NO_PORT is Linux's.
func bindAddressOnly(syscall.RawConn) error { return nil }
