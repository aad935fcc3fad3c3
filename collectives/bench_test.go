package collectives

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/stretchr/testify/require"
)

// Benchmarks, after nccl-tests: for a message of S bytes taking t,
// algbw = S/t, and the bus bandwidth, comparable to a link's bandwidth
// whatever the group size, is algbw*2(n-1)/n for AllReduce and
// algbw*(n-1)/n for AllToAll. Each collective benchmark reports busbw,
// the point-to-point bandwidth of one of the group's conns and the per-link
// bandwidth of a raw ring over them (both measured just before, on the same
// conns), and the ratios. BenchmarkP2P gives one fresh conn pair's figure.
//
//	go test -run '^$' -bench . -benchtime 10x ./collectives

const benchBytes = 16 << 20

type benchTransport struct {
	name string
	pair func(b *testing.B) (net.Conn, net.Conn)
	mesh func(b *testing.B, n int) []*Group
}

var benchTransports = []benchTransport{
	{"tcp", tcpPair, func(b *testing.B, n int) []*Group { return newGroups(b, n, tcpMesh) }},
	{"rdma", rdmaPair, func(b *testing.B, n int) []*Group {
		return joinAll(b, n, func(ctx context.Context, rank int, root string) (*Group, error) {
			return Join(ctx, rank, n, root, &rdma.Config{Provider: "soft"})
		})
	}},
}

// In the Soft-RoCE VM (scripts/softroce), the conns of the real verbs
// provider join the comparison, on the emulated device's address.
func init() {
	if testsupport.VMIP() == nil {
		return
	}
	ip := testsupport.VMIP().String()
	cfg := &rdma.Config{Provider: "rdmacore"}
	benchTransports = append(benchTransports, benchTransport{"rdmacore",
		func(b *testing.B) (net.Conn, net.Conn) { return rdmaPairWith(b, cfg, ip) },
		func(b *testing.B, n int) []*Group {
			return joinAllAt(b, n, freeAddr(b, ip), func(ctx context.Context, rank int, root string) (*Group, error) {
				bs := Bootstrap{Config: cfg, LocalAddr: ip}
				return bs.Join(ctx, rank, n, root)
			})
		}})
}

func tcpPair(b *testing.B) (net.Conn, net.Conn) {
	c := tcpMesh(b, 2)
	return c[0][1], c[1][0]
}

func rdmaPair(b *testing.B) (net.Conn, net.Conn) {
	return rdmaPairWith(b, &rdma.Config{Provider: "soft"}, "127.0.0.1")
}

func rdmaPairWith(b *testing.B, cfg *rdma.Config, ip string) (net.Conn, net.Conn) {
	lc := rdma.ListenConfig{Config: cfg}
	ln, err := lc.Listen(context.Background(), rdma.Network, net.JoinHostPort(ip, "0"))
	require.NoError(b, err)
	defer ln.Close()
	d := rdma.Dialer{Config: cfg}
	return testsupport.Connect(b, ln, func(addr string) (net.Conn, error) { return d.Dial(rdma.Network, addr) })
}

// p2pBandwidth streams total bytes one way over a conn pair and returns
// bytes per second.
func p2pBandwidth(b *testing.B, a, c net.Conn, total int) float64 {
	buf := make([]byte, 1<<20)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.CopyN(io.Discard, c, int64(total))
	}()
	start := time.Now()
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := a.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

// refBytes is streamed for each reference figure, after a warm-up.
const refBytes = 48 << 20

// streamBandwidth is the bandwidth of one link while each listed rank
// streams refBytes to the next over the group's own conns, outside the
// collectives. With one pair it is the point-to-point figure; with every
// rank sending to its right neighbour it is the ceiling for ring
// algorithms when, as on one host, all ranks share the cores.
func streamBandwidth(b *testing.B, gs []*Group, senders int) float64 {
	n := len(gs)
	run := func(total int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for r := 0; r < senders; r++ {
			right := gs[r].links[(r+1)%n].conn
			left := gs[(r+1)%n].links[r].conn
			wg.Add(2)
			go func() {
				defer wg.Done()
				buf := make([]byte, 1<<20)
				for sent := 0; sent < total; sent += len(buf) {
					if _, err := right.Write(buf); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := io.CopyN(io.Discard, left, int64(total)); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	run(4 << 20)
	return float64(refBytes) / run(refBytes).Seconds()
}

func BenchmarkP2P(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			a, c := tr.pair(b)
			defer a.Close()
			defer c.Close()
			b.ReportAllocs()
			b.SetBytes(benchBytes)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p2pBandwidth(b, a, c, benchBytes)
			}
		})
	}
}

func benchCollective(b *testing.B, factor func(n int) float64, setup func(gs []*Group) func(g *Group) error) {
	for _, tr := range benchTransports {
		for _, n := range []int{2, 4, 8} {
			b.Run(name(tr.name, "/n=", n), func(b *testing.B) {
				gs := tr.mesh(b, n)
				d := newDriver(gs)
				defer d.stop()
				ref := streamBandwidth(b, gs, 1)
				ring := streamBandwidth(b, gs, n)
				op := setup(gs)
				require.NoError(b, d.run(op))
				b.ReportAllocs()
				b.SetBytes(benchBytes)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := d.run(op); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start).Seconds()
				algbw := float64(benchBytes) * float64(b.N) / el
				busbw := algbw * factor(n)
				b.ReportMetric(busbw/1e9, "busGB/s")
				b.ReportMetric(ref/1e9, "p2pGB/s")
				b.ReportMetric(ring/1e9, "ringGB/s")
				b.ReportMetric(busbw/ref, "bus/p2p")
				b.ReportMetric(busbw/ring, "bus/ring")
			})
		}
	}
}

func BenchmarkAllReduce(b *testing.B) {
	benchCollective(b, func(n int) float64 { return 2 * float64(n-1) / float64(n) }, func(gs []*Group) func(g *Group) error {
		bufs := make([][]float32, len(gs))
		for r := range bufs {
			bufs[r] = make([]float32, benchBytes/4)
		}
		ctx := context.Background()
		return func(g *Group) error { b := bufs[g.Rank()]; return AllReduce(ctx, g, b, b, Sum) }
	})
}

func BenchmarkAllToAll(b *testing.B) {
	benchCollective(b, func(n int) float64 { return float64(n-1) / float64(n) }, func(gs []*Group) func(g *Group) error {
		n := len(gs)
		send, recv := make([][]byte, n), make([][]byte, n)
		for r := range send {
			send[r] = make([]byte, benchBytes/n*n)
			recv[r] = make([]byte, benchBytes/n*n)
		}
		ctx := context.Background()
		return func(g *Group) error { return g.AllToAll(ctx, send[g.Rank()], recv[g.Rank()]) }
	})
}

func BenchmarkBroadcast(b *testing.B) {
	benchCollective(b, func(n int) float64 { return 1 }, func(gs []*Group) func(g *Group) error {
		bufs := make([][]byte, len(gs))
		for r := range bufs {
			bufs[r] = make([]byte, benchBytes)
		}
		ctx := context.Background()
		return func(g *Group) error { return g.Broadcast(ctx, 0, bufs[g.Rank()]) }
	})
}
