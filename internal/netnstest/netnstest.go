// Package netnstest builds throw-away test networks out of Linux network
// namespaces, so that tests cross a (virtual) wire between hosts instead of
// loopback: n host namespaces, each with one veth interface "eth0" whose
// other end is a port of a bridge in a switch namespace.
//
// The addresses are 127.199.0.1 .. 127.199.0.n, in the loopback range but on
// the veth interfaces of the test's own namespaces (route_localnet on, the
// namespaces' lo left down, so 127.199.0.0/24 routes over eth0 there): the
// host's own interfaces, addresses and routes are never touched, and a
// test that ran in the wrong namespace by mistake could only reach
// loopback. Setting it up needs root and iproute2's ip; New skips the test
// with a message saying why where that is not available. Everything is
// removed when the test ends, failed or not; namespaces left behind by a
// test binary that died are removed by the next New.
package netnstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// Net is a test network.
type Net struct {
	t      testing.TB
	prefix string // namespace name prefix, "rdmat<pid>x<seq>"
	Switch string // the switch namespace
	Hosts  []*Host
}

// Host is one host namespace.
type Host struct {
	Index int
	NS    string // namespace name, for ip netns exec
	IP    string // its address on eth0
	port  string // its port on the switch's bridge
	net   *Net
}

const namePrefix = "rdmat"

var seq atomic.Int32

// New creates a network of n hosts (n <= 250) or skips t when that is not
// permitted here.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("netnstest: network namespaces need Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("netnstest: creating network namespaces needs root (run the tests as root, e.g. make test in CI)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("netnstest: iproute2's ip is not installed")
	}
	if n < 1 || n > 250 {
		t.Fatalf("netnstest: %d hosts (1 to 250)", n)
	}
	removeStale()
	nw := &Net{t: t, prefix: fmt.Sprintf("%s%dx%d", namePrefix, os.Getpid(), seq.Add(1))}
	nw.Switch = nw.prefix + "sw"
	t.Cleanup(nw.remove)
	if out, err := ip("netns", "add", nw.Switch); err != nil {
		if permissionDenied(out) {
			t.Skipf("netnstest: not permitted to create network namespaces here: %s", out)
		}
		t.Fatalf("netnstest: ip netns add: %v: %s", err, out)
	}
	nw.must("-n", nw.Switch, "link", "add", "br0", "type", "bridge")
	nw.must("-n", nw.Switch, "link", "set", "br0", "up")
	for i := 0; i < n; i++ {
		h := &Host{Index: i, NS: fmt.Sprintf("%sh%d", nw.prefix, i), IP: fmt.Sprintf("127.199.0.%d", i+1), port: fmt.Sprintf("p%d", i), net: nw}
		nw.Hosts = append(nw.Hosts, h)
		nw.must("netns", "add", h.NS)
		nw.must("link", "add", "eth0", "netns", h.NS, "type", "veth", "peer", "name", h.port, "netns", nw.Switch)
		nw.must("-n", nw.Switch, "link", "set", h.port, "master", "br0", "up")
		// 127/8 on a wire: allowed with route_localnet; lo stays down so
		// that no local 127.0.0.0/8 route shadows the subnet.
		nw.must("netns", "exec", h.NS, "sysctl", "-qw",
			"net.ipv4.conf.all.route_localnet=1", "net.ipv4.conf.default.route_localnet=1", "net.ipv4.conf.eth0.route_localnet=1")
		nw.must("-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
		nw.must("-n", h.NS, "link", "set", "eth0", "up")
	}
	return nw
}

func (nw *Net) must(args ...string) {
	nw.t.Helper()
	if out, err := ip(args...); err != nil {
		if permissionDenied(out) {
			nw.t.Skipf("netnstest: not permitted: ip %s: %s", strings.Join(args, " "), out)
		}
		nw.t.Fatalf("netnstest: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func ip(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	return string(bytes.TrimSpace(out)), err
}

func permissionDenied(out string) bool {
	return strings.Contains(out, "Operation not permitted") || strings.Contains(out, "Permission denied")
}

// remove deletes the namespaces (their veth pairs go with them).
func (nw *Net) remove() {
	for _, h := range nw.Hosts {
		ip("netns", "del", h.NS)
	}
	ip("netns", "del", nw.Switch)
}

// removeStale deletes namespaces of earlier test processes that no longer
// run (a test binary killed by a timeout runs no cleanup).
func removeStale() {
	out, err := ip("netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, namePrefix)
		if !ok {
			continue
		}
		pid, _, ok := strings.Cut(rest, "x")
		if !ok {
			continue
		}
		if p, err := strconv.Atoi(pid); err != nil || p == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pid)); err == nil {
			continue // still running
		}
		ip("netns", "del", name)
	}
}

// Exec is the command prefix that runs a program inside h's namespace.
func (h *Host) Exec() []string { return []string{"ip", "netns", "exec", h.NS} }

// Command returns a command that runs name with args inside h's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Unplug takes h's port on the switch down: h's wire goes dead with
// nothing closed on either side, as when a cable is pulled or a host
// loses power.
func (h *Host) Unplug() {
	h.net.t.Helper()
	h.net.must("-n", h.net.Switch, "link", "set", h.port, "down")
}

// Counters returns the bytes h's eth0 has sent and received.
func (h *Host) Counters() (tx, rx int64) {
	read := func(which string) int64 {
		out, err := exec.Command("ip", "netns", "exec", h.NS, "cat", "/sys/class/net/eth0/statistics/"+which).Output()
		if err != nil {
			return -1
		}
		v, _ := strconv.ParseInt(string(bytes.TrimSpace(out)), 10, 64)
		return v
	}
	return read("tx_bytes"), read("rx_bytes")
}
