package testsupport

import (
	"net"
	"os"
	"strings"
	"testing"
)

// The Soft-RoCE VM (scripts/softroce-test.sh) runs the test binaries in a
// guest whose kernel has an rdma_rxe device: SOFTROCE_DEV names it and
// SOFTROCE_IP is its address (possibly with a /prefix). Outside the VM
// neither is set.

// InVM reports whether the tests run inside the Soft-RoCE VM.
func InVM() bool { return os.Getenv("SOFTROCE_DEV") != "" }

// vmSkip is why a test that needs the device skips elsewhere.
const vmSkip = "needs an RDMA device: SOFTROCE_DEV is unset, run it inside the Soft-RoCE VM with `make test-softroce`"

// SoftRoCE returns the VM's RDMA device and its address, or skips t outside
// the VM.
func SoftRoCE(t testing.TB) (dev string, ip net.IP) {
	t.Helper()
	dev = os.Getenv("SOFTROCE_DEV")
	if dev == "" {
		t.Skip(vmSkip)
	}
	ip = VMIP()
	if ip == nil {
		t.Fatalf("SOFTROCE_IP %q is not an IP address", os.Getenv("SOFTROCE_IP"))
	}
	return dev, ip
}

// SoftRoCEHost is SoftRoCE's address as a string, for ip:port addresses.
func SoftRoCEHost(t testing.TB) string {
	t.Helper()
	_, ip := SoftRoCE(t)
	return ip.String()
}

// VMIP is the VM's device address, nil outside the VM.
func VMIP() net.IP {
	if !InVM() {
		return nil
	}
	s, _, _ := strings.Cut(os.Getenv("SOFTROCE_IP"), "/")
	return net.ParseIP(s)
}

// MixedWire is the wire scripts/softroce-mixed.sh sets up in the VM: a
// namespace without an RDMA device (ns) at address peer, reached from
// address local on this side, which carries the device (local is empty
// where the script does not need it). It skips t elsewhere.
func MixedWire(t testing.TB) (ns, peer, local string) {
	t.Helper()
	ns, peer, local = os.Getenv("MIXED_NETNS"), os.Getenv("MIXED_PEER"), os.Getenv("MIXED_LOCAL")
	if !InVM() || ns == "" || peer == "" {
		t.Skip("needs the Soft-RoCE VM set up by scripts/softroce-mixed.sh (make test-softroce-mixed)")
	}
	return ns, peer, local
}
