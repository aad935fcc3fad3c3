//go:build cgo && linux

package rdmacore

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/verbstest"
)

// pingPair is two connected ends over the Soft-RoCE address, each with one
// receive posted, and the 64-byte inline SENDs (or RDMA WRITE WITH IMMs)
// and receives each end posts per round trip.
type pingPair struct {
	srv, cli     *end
	csend, ssend []verbs.SendWR
	srecv, crecv []verbs.RecvWR
}

func newPingPair(b *testing.B, writeImm bool) *pingPair {
	_, ip := testsupport.SoftRoCE(b)
	srv, cli, _, _, _ := connect(b, ip)
	p := &pingPair{
		srv: srv,
		cli: cli,
		csend: []verbs.SendWR{{WRID: 3, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline,
			SG: []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[:64])}}},
		ssend: []verbs.SendWR{{WRID: 4, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline,
			SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[8192:8256])}}},
		srecv: []verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[:4096])}}},
		crecv: []verbs.RecvWR{{WRID: 2, SG: []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[4096:4160])}}},
	}
	if writeImm {
		p.csend[0].Opcode, p.csend[0].RemoteAddr, p.csend[0].RKey = verbs.OpRDMAWriteWithImm, srv.mr.Addr(), srv.mr.RKey()
		p.ssend[0].Opcode, p.ssend[0].RemoteAddr, p.ssend[0].RKey = verbs.OpRDMAWriteWithImm, cli.mr.Addr(), cli.mr.RKey()
	}
	// connect pre-posted one receive on the server; keep one posted per side.
	if err := cli.qp.PostRecv(p.crecv); err != nil {
		b.Fatal(err)
	}
	return p
}

// pingPong runs b.N 64-byte round trips between the two ends, as inline
// SENDs or (writeImm) RDMA_WRITE_WITH_IMMs; wait is how a side waits for
// its completion.
func pingPong(b *testing.B, writeImm bool, wait func(e *end, wc []verbs.WC)) {
	p := newPingPair(b, writeImm)
	srv, cli := p.srv, p.cli
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	wc := make([]verbs.WC, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(cli.qp.PostSend(p.csend))
		wait(cli, wc) // send completion
		wait(srv, wc) // receive
		must(srv.qp.PostRecv(p.srecv))
		must(srv.qp.PostSend(p.ssend))
		wait(srv, wc)
		wait(cli, wc)
		must(cli.qp.PostRecv(p.crecv))
	}
	b.StopTimer()
	disconnect(b, cli, srv)
}

func busyWait(b *testing.B) func(e *end, wc []verbs.WC) {
	return func(e *end, wc []verbs.WC) {
		for {
			n, err := e.cq.Poll(wc)
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				if wc[0].Status != verbs.WCSuccess {
					b.Fatal(wc[0].Status)
				}
				return
			}
		}
	}
}

func eventWait(b *testing.B) func(e *end, wc []verbs.WC) {
	return func(e *end, wc []verbs.WC) {
		w := e.wait(b)
		if w.Status != verbs.WCSuccess {
			b.Fatal(w.Status)
		}
	}
}

func BenchmarkPingPongBusyPoll(b *testing.B)       { pingPong(b, false, busyWait(b)) }
func BenchmarkPingPongEvents(b *testing.B)         { pingPong(b, false, eventWait(b)) }
func BenchmarkPingPongWriteImmEvents(b *testing.B) { pingPong(b, true, eventWait(b)) }

// pollRecv polls e's CQ for one completion: got says it was a receive
// (with or without a WRITE's immediate); send completions, signaled, come
// on the way and count only in n.
func pollRecv(e *end, wc []verbs.WC) (got bool, n int, err error) {
	if n, err = e.cq.Poll(wc[:1]); err != nil || n == 0 {
		return false, n, err
	}
	if wc[0].Status != verbs.WCSuccess {
		return false, n, fmt.Errorf("completion %v", wc[0].Status)
	}
	return wc[0].Opcode&verbs.WCRecv != 0, n, nil
}

// spinForRecv busy-polls e's CQ until a receive completes, yielding the P
// every yieldEvery of empty polls (0: never).
func spinForRecv(e *end, wc []verbs.WC, yieldEvery time.Duration) error {
	last := time.Now()
	for {
		got, n, err := pollRecv(e, wc)
		if got || err != nil {
			return err
		}
		if n == 0 && yieldEvery > 0 {
			if now := time.Now(); now.Sub(last) >= yieldEvery {
				runtime.Gosched()
				last = now
			}
		}
	}
}

// BenchmarkPingPongEventsTwoGoroutines is PingPongEvents with each end on a
// goroutine of its own, as two connections' Reads are: the difference from
// PingPongEvents is what Go's scheduler adds when a completion must wake
// another goroutine (in rdma.Conn, another process's), not the verbs.
func BenchmarkPingPongEventsTwoGoroutines(b *testing.B) {
	p := newPingPair(b, false)
	srv, cli := p.srv, p.cli
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	// recv waits on e's completion channel until its receive completes.
	recv := func(e *end, wc []verbs.WC) error {
		for {
			got, n, err := pollRecv(e, wc)
			if got || err != nil {
				return err
			}
			if n == 1 {
				continue
			}
			if err := e.cq.ReqNotify(false); err != nil {
				return err
			}
			if got, n, err = pollRecv(e, wc); got || err != nil {
				return err
			}
			if n == 1 {
				continue
			}
			ev, err := e.cc.GetEvent()
			if err != nil {
				return err
			}
			e.cc.AckEvents(ev, 1)
		}
	}
	served := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		wc := make([]verbs.WC, 1)
		for i := 0; i < b.N; i++ {
			if err := recv(srv, wc); err != nil {
				served <- err
				return
			}
			if err := srv.qp.PostRecv(p.srecv); err != nil {
				served <- err
				return
			}
			if err := srv.qp.PostSend(p.ssend); err != nil {
				served <- err
				return
			}
		}
		served <- nil
	}()
	wc := make([]verbs.WC, 1)
	for i := 0; i < b.N; i++ {
		must(cli.qp.PostSend(p.csend))
		must(recv(cli, wc))
		must(cli.qp.PostRecv(p.crecv))
	}
	must(<-served)
	b.StopTimer()
	disconnect(b, cli, srv)
}

// BenchmarkPingPongBusyPollTwoGoroutines is rstream's busy ping-pong in Go
// with nothing else: each end on a goroutine of its own busy-polls its CQ
// (yielding its P every 10 us, as rdma.Conn's BusyPoll does, or never;
// SENDs, or RDMA WRITE WITH IMMs as rdma.Conn's data), so
// in the Soft-RoCE guest it is the floor under rdma.Conn's BusyPoll round
// trip that Go's runtime sets. It reports the median and the 99th percentile
// round trip beside the mean.
func BenchmarkPingPongBusyPollTwoGoroutines(b *testing.B) {
	b.Run("yield10us", func(b *testing.B) { pingPongBusyTwoGoroutines(b, false, 10*time.Microsecond) })
	b.Run("noyield", func(b *testing.B) { pingPongBusyTwoGoroutines(b, false, 0) })
	// rdma.Conn's data goes as RDMA WRITE WITH IMM
	b.Run("writeimm", func(b *testing.B) { pingPongBusyTwoGoroutines(b, true, 10*time.Microsecond) })
}

func pingPongBusyTwoGoroutines(b *testing.B, writeImm bool, yieldEvery time.Duration) {
	p := newPingPair(b, writeImm)
	srv, cli := p.srv, p.cli
	recv := func(e *end, wc []verbs.WC) error { return spinForRecv(e, wc, yieldEvery) }
	rtts := make([]time.Duration, b.N)
	served := make(chan error, 1)
	b.ResetTimer()
	go func() {
		wc := make([]verbs.WC, 1)
		for i := 0; i < b.N; i++ {
			err := recv(srv, wc)
			if err == nil {
				err = srv.qp.PostRecv(p.srecv)
			}
			if err == nil {
				err = srv.qp.PostSend(p.ssend)
			}
			if err != nil {
				served <- err
				return
			}
		}
		served <- nil
	}()
	wc := make([]verbs.WC, 1)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		err := cli.qp.PostSend(p.csend)
		if err == nil {
			err = recv(cli, wc)
		}
		if err == nil {
			err = cli.qp.PostRecv(p.crecv)
		}
		if err != nil {
			b.Fatal(err)
		}
		rtts[i] = time.Since(start)
	}
	if err := <-served; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "p99-ns")
	disconnect(b, cli, srv)
}

// BenchmarkExpose1M: exposing 1 MiB to the peer for one transfer and
// revoking it, the rendezvous' two ways: a window's bind and invalidation,
// or a registration and its deregistration.
func BenchmarkExpose1M(b *testing.B) {
	_, ip := testsupport.SoftRoCE(b)
	cfg := verbstest.Config{Provider: ProviderName, IP: ip}
	b.Run("window", func(b *testing.B) { verbstest.BenchExpose(b, cfg, 1<<20, true) })
	b.Run("registration", func(b *testing.B) { verbstest.BenchExpose(b, cfg, 1<<20, false) })
}

// BenchmarkRead1M: 1 MiB RDMA READs one at a time (a rendezvous' pattern),
// of a region's bytes and through a window bound to them.
func BenchmarkRead1M(b *testing.B) {
	_, ip := testsupport.SoftRoCE(b)
	cfg := verbstest.Config{Provider: ProviderName, IP: ip}
	b.Run("region", func(b *testing.B) { verbstest.BenchRead(b, cfg, 1<<20, 1) })
	b.Run("window", func(b *testing.B) { verbstest.BenchReadWindow(b, cfg, 1<<20, 1) })
}

// BenchmarkReadSplit: 1 MiB moved by READs of 1 MiB, 256 KiB or 64 KiB,
// with the 1 MiB in flight: whether a rendezvous should split its READ.
func BenchmarkReadSplit(b *testing.B) {
	_, ip := testsupport.SoftRoCE(b)
	cfg := verbstest.Config{Provider: ProviderName, IP: ip}
	for _, size := range []int{1 << 20, 256 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dK", size>>10), func(b *testing.B) { verbstest.BenchRead(b, cfg, size, (1<<20)/size) })
	}
}

// BenchmarkManyPingPong64: 64-byte ping-pongs on 1, 8 and 64 pairs at once,
// each QP with its own CQ and waiter beside all QPs of a side on one CQ
// and channel (one waiter that dispatches to the QPs' goroutines, or that
// answers itself); cpu-ns/op is the process's CPU time per round trip.
// The figure that says whether gathering completions per shard pays on
// rxe, as verbs/soft's benchmark of the same name does there.
func BenchmarkManyPingPong64(b *testing.B) {
	_, ip := testsupport.SoftRoCE(b)
	cfg := verbstest.Config{Provider: ProviderName, IP: ip}
	for _, pairs := range []int{1, 8, 64} {
		for _, layout := range []verbstest.CQLayout{verbstest.CQPerQP, verbstest.CQSharedDispatch, verbstest.CQSharedInline} {
			b.Run(fmt.Sprintf("pairs=%d/%v", pairs, layout), func(b *testing.B) {
				verbstest.BenchManyPingPong(b, cfg, pairs, 64, layout)
			})
		}
	}
}
