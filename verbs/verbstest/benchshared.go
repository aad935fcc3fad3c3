package verbstest

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// CQLayout says how BenchManyPingPong's QPs complete and who waits.
type CQLayout int

const (
	// CQPerQP: each QP has its own CQ and completion channel, and a
	// goroutine of its own waits on it (the engine of today's rdma.Conn).
	CQPerQP CQLayout = iota
	// CQSharedDispatch: all QPs of a side complete on one CQ with one
	// channel; one goroutine waits and hands each reply to the QP's own
	// goroutine (an engine whose shard waiter readies the connection's
	// reader).
	CQSharedDispatch
	// CQSharedInline: one CQ and channel a side, and the one waiting
	// goroutine answers each reply itself.
	CQSharedInline
)

func (l CQLayout) String() string {
	switch l {
	case CQPerQP:
		return "per-qp"
	case CQSharedDispatch:
		return "shared-dispatch"
	case CQSharedInline:
		return "shared-inline"
	}
	return "unknown"
}

// ProcessCPU is the CPU time (user plus system) this process has used:
// a benchmark's cpu-ns/op is its difference over the run.
func ProcessCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pingQP is one QP's state in BenchManyPingPong: its WRs (reused, so
// the data path allocates nothing) and the count that spaces signaled
// sends.
type pingQP struct {
	e     *endpoint
	recv  []verbs.RecvWR
	send  []verbs.SendWR
	sends int
	wake  chan struct{} // CQSharedDispatch: a reply is waiting
}

// post sends the QP's message; every 16th send is signaled, so that the
// send queue drains, as hardware requires.
func (q *pingQP) post() error {
	q.sends++
	q.send[0].Flags = 0
	if q.sends%16 == 0 {
		q.send[0].Flags = verbs.SendSignaled
	}
	return q.e.qp.PostSend(q.send)
}

// BenchManyPingPong measures pairs concurrent ping-pongs of size-byte
// SENDs, each answered by a size-byte SEND, with the completions waited
// for as layout says on both sides. An operation is one round trip, of
// whichever pair; besides ns/op it reports cpu-ns/op, the process's CPU
// time (getrusage: both sides, the provider's goroutines included) per
// round trip, which is what sharing CQs is meant to lower.
func BenchManyPingPong(b *testing.B, cfg Config, pairs, size int, layout CQLayout) {
	s := benchSuite(b, cfg)
	o := defaultOpts()
	o.sharedCQ = true
	o.memSize = 1 << 16
	o.cap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	var cli, srv []*pingQP
	var cliSide, srvSide *sharedSide
	wrap := func(e *endpoint) *pingQP {
		return &pingQP{e: e,
			recv: []verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[size:2*size])}}},
			send: []verbs.SendWR{{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[:size])}}},
			wake: make(chan struct{}, 1)}
	}
	if layout == CQPerQP {
		lch, lid := s.listener(b)
		for range pairs {
			c, sv := s.pairOn(b, lch, lid, o)
			cli, srv = append(cli, wrap(c)), append(srv, wrap(sv))
		}
	} else {
		// Each QP holds at most a receive and 64 sends' completions.
		cliSide, srvSide = s.sharedPairs(b, pairs, 65*pairs, o)
		for p := range pairs {
			cli, srv = append(cli, wrap(cliSide.eps[p])), append(srv, wrap(srvSide.eps[p]))
		}
	}
	for p := range pairs {
		require.NoError(b, srv[p].e.qp.PostRecv(srv[p].recv))
		require.NoError(b, cli[p].e.qp.PostRecv(cli[p].recv))
	}

	// The round trips to make: a client QP whose reply came takes the
	// next one, so the pairs share b.N however fast each one is.
	var left, done atomic.Int64
	finished := make(chan struct{})
	var stop atomic.Bool
	errc := make(chan error, 4*pairs+2)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	// A server QP answers each message; a client QP counts the reply and
	// sends the next message while round trips are left.
	answer := func(q *pingQP) error {
		if err := q.e.qp.PostRecv(q.recv); err != nil {
			return err
		}
		return q.post()
	}
	reply := func(q *pingQP) error {
		if err := q.e.qp.PostRecv(q.recv); err != nil {
			return err
		}
		if done.Add(1) == int64(b.N) {
			close(finished)
		}
		if left.Add(-1) >= 0 {
			return q.post()
		}
		return nil
	}

	// waiter drains cq, sleeping on cc, and gives each receive to
	// onRecv with the QP it names; it ends, without error, once stop is
	// set and its channel's deadline has woken it.
	var wg sync.WaitGroup
	waiter := func(cq verbs.CQ, cc verbs.CompChannel, qpOf func(qpn uint32) *pingQP, onRecv func(q *pingQP) error) {
		defer wg.Done()
		wc := make([]verbs.WC, 64)
		for {
			n, err := waitCQ(cq, cc, wc)
			if err != nil {
				if stop.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
				fail(err)
				return
			}
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess {
					fail(errors.New("completion " + w.Status.String()))
					return
				}
				if w.Opcode != verbs.WCRecv {
					continue
				}
				q := qpOf(w.QPNum)
				if q == nil {
					fail(errors.New("a completion of no QP on the CQ"))
					return
				}
				if err := onRecv(q); err != nil {
					fail(err)
					return
				}
			}
		}
	}
	dispatch := func(q *pingQP) error {
		q.wake <- struct{}{} // one message in flight per QP: never full
		return nil
	}
	var dwg sync.WaitGroup
	runner := func(q *pingQP, onRecv func(q *pingQP) error) {
		defer dwg.Done()
		for range q.wake {
			if err := onRecv(q); err != nil {
				fail(err)
				return
			}
		}
	}
	lookup := func(sd *sharedSide, qs []*pingQP) func(uint32) *pingQP {
		return func(qpn uint32) *pingQP {
			if p := sd.pairOf(qpn); p >= 0 {
				return qs[p]
			}
			return nil
		}
	}
	var channels []verbs.CompChannel
	start := func(qs []*pingQP, sd *sharedSide, onRecv func(q *pingQP) error) {
		switch layout {
		case CQPerQP:
			for _, q := range qs {
				wg.Add(1)
				channels = append(channels, q.e.cc)
				go waiter(q.e.scq, q.e.cc, func(uint32) *pingQP { return q }, onRecv)
			}
		case CQSharedDispatch:
			for _, q := range qs {
				dwg.Add(1)
				go runner(q, onRecv)
			}
			wg.Add(1)
			channels = append(channels, sd.cc)
			go waiter(sd.cq, sd.cc, lookup(sd, qs), dispatch)
		case CQSharedInline:
			wg.Add(1)
			channels = append(channels, sd.cc)
			go waiter(sd.cq, sd.cc, lookup(sd, qs), onRecv)
		}
	}
	start(srv, srvSide, answer)
	left.Store(int64(b.N))
	for _, q := range cli {
		if left.Add(-1) >= 0 {
			require.NoError(b, q.post())
		}
	}
	start(cli, cliSide, reply)

	startTimer(b, size)
	cpu0 := ProcessCPU(b)
	select {
	case <-finished:
	case err := <-errc:
		b.Fatal(err)
	}
	cpu := ProcessCPU(b) - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")

	stop.Store(true)
	for _, cc := range channels {
		require.NoError(b, cc.SetDeadline(time.Now()))
	}
	wg.Wait()
	for _, q := range append(cli, srv...) {
		close(q.wake)
	}
	dwg.Wait()
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
	for _, cc := range channels {
		require.NoError(b, cc.SetDeadline(time.Time{}))
	}
}
