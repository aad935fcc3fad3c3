package soft_test

import (
	"net"
	"testing"

	"github.com/rdmanet/rdma/verbs/verbstest"
)

var benchCfg = verbstest.Config{Provider: "soft", IP: net.IPv4(127, 0, 0, 1)}

// BenchmarkWrite64K: RDMA WRITE throughput beside TCP loopback in the same run.
func BenchmarkWrite64K(b *testing.B) {
	b.Run("soft", func(b *testing.B) { verbstest.BenchWrite(b, benchCfg, 64<<10) })
	b.Run("tcp", func(b *testing.B) { verbstest.BenchTCPWrite(b, benchCfg.IP, 64<<10) })
}

// BenchmarkPingPong64: 64-byte SEND/RECV round trip beside TCP loopback.
func BenchmarkPingPong64(b *testing.B) {
	b.Run("soft", func(b *testing.B) { verbstest.BenchPingPong(b, benchCfg, 64) })
	b.Run("tcp", func(b *testing.B) { verbstest.BenchTCPPingPong(b, benchCfg.IP, 64) })
}
