package soft

import (
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Congestion control of same-host connections. Two processes of one host
// that talk over TCP (shared memory off, or not possible) do so through the
// loopback device, where there is no network to share and no queue to
// keep short: congestion control there only decides when the sender may
// send. Some hosts default to BBR, which paces every sender with a timer
// at the rate it has measured, and a connection whose traffic comes in
// bursts with pauses between them (a rendezvous: a request, a megabyte,
// a done message) keeps measuring a low rate. On a 2-CPU Linux 6.18 host
// with BBR as its default, a 1 MiB exchange of that shape between two
// goroutines on plain sockets took 320 us with BBR (the first byte reached
// the reader 280 us after the write began) and 140-170 us with Reno or
// CUBIC. With rdmaperf (-loopback -fork -provider soft -test stream,
// RDMA_SOFT_SHM=0) the TCP baseline moved 1 MiB messages at 3978 MiB/s
// with BBR and 6442 with -tcp-cc reno, and soft's TCP path, once it used
// Reno, 3888 instead of 1473 copying and 3563 instead of 2048 from
// Buffers (docs/design.md). So a soft connection whose two ends are on
// one host uses Reno, which every Linux kernel has and lets unprivileged
// processes choose unless an administrator took it away (then the
// system's choice stands). Between hosts the system's choice always
// stands: there it governs a network others share.

// SameHostTCPCCEnv names the congestion control algorithm soft's TCP
// connections between two ends on one host use ("reno" if unset), or
// "system" to leave them with the system's default.
const SameHostTCPCCEnv = "RDMA_SOFT_TCP_CC"

// defaultSameHostCC is the algorithm same-host connections use.
const defaultSameHostCC = "reno"

// sameHostCC is the algorithm set on same-host connections, "" for none.
var sameHostCC atomic.Pointer[string]

func init() { setSameHostCC(os.Getenv(SameHostTCPCCEnv)) }

// setSameHostCC sets the algorithm from the environment's spelling, and
// returns the previous one ("" for the system's).
func setSameHostCC(v string) string {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		v = defaultSameHostCC
	case strings.EqualFold(v, "system"):
		v = ""
	}
	prev := sameHostCC.Swap(&v)
	if prev == nil {
		return ""
	}
	return *prev
}

// sameHost reports whether a TCP connection from local to remote stays on
// this host's loopback device: the kernel gave the socket the same address
// at both ends (a connection to one of our own addresses leaves from it),
// or both addresses lie on a loopback interface that is up. Not every
// 127.x address is one: the repository's tests put such addresses on the
// veths of network namespaces that stand for other hosts, and there the
// system's choice stands as between hosts.
func sameHost(local, remote net.Addr) bool {
	return sameHostOn(loopbackNets(), local, remote)
}

func sameHostOn(lo []*net.IPNet, local, remote net.Addr) bool {
	la, ok1 := local.(*net.TCPAddr)
	ra, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 || ra.IP == nil {
		return false
	}
	if ra.IP.Equal(la.IP) {
		return true
	}
	on := func(ip net.IP) bool {
		for _, n := range lo {
			if n.Contains(ip) {
				return true
			}
		}
		return false
	}
	return on(la.IP) && on(ra.IP)
}

// loopbackNets are the networks of the host's loopback interfaces that
// are up (127.0.0.0/8 and ::1 on lo), read once: a connection's setup
// then costs no interface listing.
var loopbackNets = sync.OnceValue(func() []*net.IPNet {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var nets []*net.IPNet
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 || i.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				nets = append(nets, n)
			}
		}
	}
	return nets
})

// tuneSameHost gives a same-host connection its congestion control
// (above). It is best effort: a kernel or a policy that refuses it leaves
// the system's, which works, only slower.
func tuneSameHost(c *net.TCPConn, rc syscall.RawConn) {
	cc := sameHostCC.Load()
	if cc == nil || *cc == "" || !sameHost(c.LocalAddr(), c.RemoteAddr()) {
		return
	}
	_ = setCongestionControl(rc, *cc)
}
