package soft_test

import (
	"net"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
	"github.com/rdmanet/rdma/verbs/verbstest"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		killChild(addr)
	}
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	verbstest.Run(t, verbstest.Config{
		Provider:    "soft",
		IP:          net.IPv4(127, 0, 0, 1),
		TCPListener: true,
		SilencePeer: func(t *testing.T, q verbs.QP) { soft.Silence(q) },
	})
}
