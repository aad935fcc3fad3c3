package soft_test

import (
	"fmt"
	"net"
	"runtime"
	"testing"

	"github.com/rdmanet/rdma/verbs/soft"
	"github.com/rdmanet/rdma/verbs/verbstest"
)

var benchCfg = verbstest.Config{Provider: "soft", IP: net.IPv4(127, 0, 0, 1)}

// softPaths runs f over each transport the soft provider has between two
// endpoints on one host: TCP (the path between hosts) and, on Linux, shared
// memory (the default between local processes).
func softPaths(b *testing.B, f func(b *testing.B)) {
	b.Run("soft-tcp", func(b *testing.B) {
		prev := soft.SetSharedMemory(false)
		defer soft.SetSharedMemory(prev)
		f(b)
	})
	if runtime.GOOS == "linux" {
		b.Run("soft-shm", func(b *testing.B) {
			prev := soft.SetSharedMemory(true)
			defer soft.SetSharedMemory(prev)
			f(b)
		})
	}
}

// BenchmarkWrite64K: RDMA WRITE throughput beside TCP loopback in the same run.
func BenchmarkWrite64K(b *testing.B) {
	softPaths(b, func(b *testing.B) { verbstest.BenchWrite(b, benchCfg, 64<<10) })
	b.Run("tcp", func(b *testing.B) { verbstest.BenchTCPWrite(b, benchCfg.IP, 64<<10) })
}

// BenchmarkPingPong64: 64-byte SEND/RECV round trip beside TCP loopback.
func BenchmarkPingPong64(b *testing.B) {
	softPaths(b, func(b *testing.B) { verbstest.BenchPingPong(b, benchCfg, 64) })
	b.Run("tcp", func(b *testing.B) { verbstest.BenchTCPPingPong(b, benchCfg.IP, 64) })
}

// BenchmarkManyPingPong64: 64-byte ping-pongs on 1, 8 and 64 pairs at once,
// each QP with its own CQ and waiter beside all QPs of a side on one CQ
// and channel (one waiter that dispatches to the QPs' goroutines, or that
// answers itself). cpu-ns/op is the process's CPU time per round trip.
func BenchmarkManyPingPong64(b *testing.B) {
	softPaths(b, func(b *testing.B) {
		for _, pairs := range []int{1, 8, 64} {
			for _, layout := range []verbstest.CQLayout{verbstest.CQPerQP, verbstest.CQSharedDispatch, verbstest.CQSharedInline} {
				b.Run(fmt.Sprintf("pairs=%d/%v", pairs, layout), func(b *testing.B) {
					verbstest.BenchManyPingPong(b, benchCfg, pairs, 64, layout)
				})
			}
		}
	})
}

// BenchmarkRead1M: 1 MiB RDMA READs one at a time (a rendezvous' pattern)
// and 8 in flight, beside TCP loopback.
func BenchmarkRead1M(b *testing.B) {
	for _, depth := range []int{1, 8} {
		b.Run(fmt.Sprintf("depth%d", depth), func(b *testing.B) {
			softPaths(b, func(b *testing.B) { verbstest.BenchRead(b, benchCfg, 1<<20, depth) })
		})
	}
	b.Run("tcp", func(b *testing.B) { verbstest.BenchTCPWrite(b, benchCfg.IP, 1<<20) })
}

// BenchmarkExpose1M: exposing 1 MiB to the peer for one transfer and
// revoking it, by a window or by a registration (the rendezvous' two ways).
func BenchmarkExpose1M(b *testing.B) {
	b.Run("window", func(b *testing.B) { verbstest.BenchExpose(b, benchCfg, 1<<20, true) })
	b.Run("registration", func(b *testing.B) { verbstest.BenchExpose(b, benchCfg, 1<<20, false) })
}
