package soft_test

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
	"github.com/rdmanet/rdma/verbs/verbstest"
)

// hostileEnv names the role of a child process that plays a hostile peer
// (hostile_test.go, where hostileChild runs it).
const hostileEnv = "SOFT_TEST_HOSTILE"

var hostileChild func(role string)

func TestMain(m *testing.M) {
	if role := os.Getenv(hostileEnv); role != "" && hostileChild != nil {
		hostileChild(role)
	}
	testsupport.Main(m)
}

func TestConformance(t *testing.T) {
	verbstest.Run(t, verbstest.Config{
		Provider:      "soft",
		IP:            net.IPv4(127, 0, 0, 1),
		TCPListener:   true,
		SilencePeer:   func(t *testing.T, q verbs.QP) { soft.Silence(q) },
		PrepareDevice: bindLoopback,
	})
}

// bindLoopback gives a device an address on loopback, with a free port,
// for QPs without the CM.
func bindLoopback(t testing.TB, ctx verbs.Context) {
	if err := soft.Bind(ctx, netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
}
