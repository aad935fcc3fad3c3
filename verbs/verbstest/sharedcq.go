package verbstest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("SharedCQ", testSharedCQ)
	register("SharedCQFlushOne", testSharedCQFlushOne)
	register("SharedCQOverrun", testSharedCQOverrun)
}

// sharedSide is one side of many connections whose QPs all complete on
// one CQ, with one completion channel: the shape of an engine that gathers
// the completions of its connections per shard (UCX's worker, libfabric's
// shared CQs) instead of giving each connection its own.
type sharedSide struct {
	cc    verbs.CompChannel
	cq    verbs.CQ
	eps   []*endpoint
	byQPN map[uint32]int // QP number -> index in eps
}

// pairOf maps a completion's QP number to its connection, or -1.
func (sd *sharedSide) pairOf(qpn uint32) int {
	if i, ok := sd.byQPN[qpn]; ok {
		return i
	}
	return -1
}

// sharedPairs connects n pairs. On each side every QP's send and receive
// CQ is the side's one CQ of cqe entries, attached to the side's one
// completion channel.
func (s *suite) sharedPairs(t testing.TB, n, cqe int, o pairOpts) (client, server *sharedSide) {
	lch, lid := s.listener(t)
	client = &sharedSide{byQPN: map[uint32]int{}}
	server = &sharedSide{byQPN: map[uint32]int{}}
	for i := 0; i < n; i++ {
		c := s.dialer(t, lid.LocalAddr())
		s.sharedResources(t, client, c, cqe, &o)
		require.NoError(t, c.id.Connect(&o.connect))
		req := s.expect(t, lch, verbs.EventConnectRequest)
		sv := &endpoint{ch: lch, id: req.ID}
		s.sharedResources(t, server, sv, cqe, &o)
		require.NoError(t, sv.id.Accept(&o.accept))
		s.expect(t, c.ch, verbs.EventEstablished)
		s.expect(t, lch, verbs.EventEstablished)
	}
	return client, server
}

// sharedResources gives e a PD, a QP on the side's CQ (created with the
// side's first endpoint) and an MR. The CQ and channel are released after
// every endpoint of the side (cleanups run last-in first-out).
func (s *suite) sharedResources(t testing.TB, sd *sharedSide, e *endpoint, cqe int, o *pairOpts) {
	ctx := e.id.Context()
	require.NotNil(t, ctx, "ID has no device")
	var err error
	if sd.cq == nil {
		sd.cc, err = ctx.CreateCompChannel()
		require.NoError(t, err)
		sd.cq, err = ctx.CreateCQ(cqe, sd.cc)
		require.NoError(t, err)
		t.Cleanup(func() {
			drainEvents(sd)
			require.NoError(t, sd.cq.Destroy())
			require.NoError(t, sd.cc.Close())
		})
	}
	t.Cleanup(func() { e.release(t) })
	e.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	e.qp, err = e.id.CreateQP(e.pd, &verbs.QPInitAttr{SendCQ: sd.cq, RecvCQ: sd.cq, Cap: o.cap, SignalAll: o.signalAll})
	require.NoError(t, err)
	e.registerMemory(t, o)
	_, dup := sd.byQPN[e.qp.Num()]
	require.False(t, dup, "QP number %d given twice", e.qp.Num())
	sd.byQPN[e.qp.Num()] = len(sd.eps)
	sd.eps = append(sd.eps, e)
}

// drainEvents takes and acknowledges the events left on the side's
// channel (an arm whose event nobody waited for), as the verbs require
// before the CQ is destroyed.
func drainEvents(sd *sharedSide) {
	for {
		if sd.cc.SetDeadline(time.Now().Add(20*time.Millisecond)) != nil {
			return
		}
		cq, err := sd.cc.GetEvent()
		if err != nil {
			_ = sd.cc.SetDeadline(time.Time{})
			return
		}
		sd.cc.AckEvents(cq, 1)
	}
}

// sharedTag is the wr_id of a pair's k-th WR: pair and sequence both
// recoverable, never zero.
func sharedTag(pair, k int) uint64 { return 0x5c<<56 | uint64(pair)<<32 | uint64(k) }

// sharedPattern is the first byte of pair's r-th message.
func sharedPattern(pair, r, kind int) byte { return byte(pair*37 + r*5 + kind*101 + 1) }

// wakeStats counts what one waiter saw.
type wakeStats struct {
	wakeups     int // events taken from the channel
	completions int
	maxQPs      int // most distinct QPs drained after one wake-up
}

// waitShared is the one waiter of a side: it drains the side's CQ,
// handing each completion to check, until want completions have come;
// when the CQ is empty it arms it, polls once more, and sleeps in
// GetEvent, as an engine's shard waiter does. It returns its counts, or
// the first error (check's included). The channel's deadline bounds the
// whole wait.
func waitShared(sd *sharedSide, want int, timeout time.Duration, check func(w *verbs.WC) error) (wakeStats, error) {
	var st wakeStats
	if err := sd.cc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return st, err
	}
	defer func() { _ = sd.cc.SetDeadline(time.Time{}) }()
	wc := make([]verbs.WC, 64)
	qps := map[uint32]struct{}{}
	drain := func() (int, error) {
		total := 0
		for {
			n, err := sd.cq.Poll(wc)
			if err != nil {
				return total, err
			}
			for i := range wc[:n] {
				qps[wc[i].QPNum] = struct{}{}
				if err := check(&wc[i]); err != nil {
					return total, err
				}
			}
			total += n
			st.completions += n
			if n < len(wc) {
				return total, nil
			}
		}
	}
	for st.completions < want {
		if _, err := drain(); err != nil {
			return st, err
		}
		if st.completions >= want {
			break
		}
		if err := sd.cq.ReqNotify(false); err != nil {
			return st, err
		}
		// Completions that came between the last poll and the arming
		// raise no event: poll again before sleeping.
		if n, err := drain(); err != nil || n > 0 {
			if err != nil {
				return st, err
			}
			continue
		}
		cq, err := sd.cc.GetEvent()
		if err != nil {
			return st, fmt.Errorf("waiting with %d of %d completions: %w", st.completions, want, err)
		}
		sd.cc.AckEvents(cq, 1)
		if cq != sd.cq {
			return st, fmt.Errorf("event for CQ %v, not the side's %v", cq, sd.cq)
		}
		st.wakeups++
		clear(qps)
		if _, err := drain(); err != nil {
			return st, err
		}
		st.maxQPs = max(st.maxQPs, len(qps))
	}
	if st.completions > want {
		return st, fmt.Errorf("%d completions, %d expected", st.completions, want)
	}
	return st, nil
}

// testSharedCQ: many QPs whose send and receive CQs are one CQ per side,
// with one completion channel per side. Traffic on all of them at once
// (SENDs and RDMA WRITEs with immediate, each side drained by one waiter)
// completes every WR once, with its own QP number and wr_id, in each QP's
// order; one event, on an armed shared CQ, wakes a waiter that then finds
// the completions of many QPs, and no second event comes without a new
// arm.
func testSharedCQ(t *testing.T, s *suite) {
	const pairs, rounds, size = 16, 32, 64
	o := defaultOpts()
	o.cap = verbs.QPCap{MaxSendWR: 2 * rounds, MaxRecvWR: 2*rounds + 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	o.memSize = 64 << 10
	client, server := s.sharedPairs(t, pairs, 4*pairs*rounds, o)
	const writeAt = 32 << 10 // where the WRITEs land in the server's memory

	// The server's receives: k-th of pair p is tag(p, k), 64 bytes at k*64.
	for p, sv := range server.eps {
		for k := 0; k < 2*rounds; k++ {
			postRecv(t, sv, sharedTag(p, k), k*size, size)
		}
	}
	// Both waiters start before the traffic and run beside it.
	type result struct {
		st  wakeStats
		err error
	}
	nextSend := make([]int, pairs)
	nextRecv := make([]int, pairs)
	clientDone, serverDone := make(chan result, 1), make(chan result, 1)
	go func() {
		st, err := waitShared(client, pairs*2*rounds, s.cfg.Timeout, func(w *verbs.WC) error {
			p := client.pairOf(w.QPNum)
			if p < 0 {
				return fmt.Errorf("client completion with a QP number of no QP on the CQ: %+v", *w)
			}
			k := nextSend[p]
			if w.Status != verbs.WCSuccess || w.WRID != sharedTag(p, k) {
				return fmt.Errorf("client QP %d: completion %+v (%v), want wr_id %#x", p, *w, w.Status, sharedTag(p, k))
			}
			want := verbs.WCSend
			if k%2 == 1 {
				want = verbs.WCRDMAWrite
			}
			if w.Opcode != want {
				return fmt.Errorf("client QP %d WR %d: opcode %v, want %v", p, k, w.Opcode, want)
			}
			nextSend[p]++
			return nil
		})
		clientDone <- result{st, err}
	}()
	go func() {
		st, err := waitShared(server, pairs*2*rounds, s.cfg.Timeout, func(w *verbs.WC) error {
			p := server.pairOf(w.QPNum)
			if p < 0 {
				return fmt.Errorf("server completion with a QP number of no QP on the CQ: %+v", *w)
			}
			k := nextRecv[p]
			if w.Status != verbs.WCSuccess || w.WRID != sharedTag(p, k) || w.ByteLen != size {
				return fmt.Errorf("server QP %d: completion %+v (%v), want wr_id %#x", p, *w, w.Status, sharedTag(p, k))
			}
			buf := server.eps[p].buf
			// RC keeps a QP's order: SEND r takes receive 2r, the WRITE
			// with immediate r receive 2r+1.
			r := k / 2
			if k%2 == 0 {
				if w.Opcode != verbs.WCRecv || w.Flags&verbs.WCWithImm != 0 {
					return fmt.Errorf("server QP %d receive %d: %+v, want a plain SEND", p, k, *w)
				}
				if got, want := buf[k*size], sharedPattern(p, r, 0); got != want {
					return fmt.Errorf("server QP %d receive %d holds %#x, want %#x", p, k, got, want)
				}
			} else {
				if w.Opcode != verbs.WCRecvRDMAWithImm || w.Flags&verbs.WCWithImm == 0 || w.Imm != uint32(p<<16|r) {
					return fmt.Errorf("server QP %d receive %d: %+v, want a WRITE with immediate %#x", p, k, *w, p<<16|r)
				}
				if got, want := buf[writeAt+r*size], sharedPattern(p, r, 1); got != want {
					return fmt.Errorf("server QP %d WRITE %d holds %#x, want %#x", p, r, got, want)
				}
			}
			nextRecv[p]++
			return nil
		})
		serverDone <- result{st, err}
	}()

	// Every client QP posts at once, from a goroutine of its own.
	var wg sync.WaitGroup
	postErr := make(chan error, pairs)
	for p, c := range client.eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sv := server.eps[p]
			for r := 0; r < rounds; r++ {
				msg, wr := c.buf[2*r*size:(2*r+1)*size], c.buf[(2*r+1)*size:(2*r+2)*size]
				fill(msg, sharedPattern(p, r, 0))
				fill(wr, sharedPattern(p, r, 1))
				err := c.qp.PostSend([]verbs.SendWR{
					{WRID: sharedTag(p, 2*r), Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, msg)}},
					{WRID: sharedTag(p, 2*r+1), Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(p<<16 | r), Flags: verbs.SendSignaled,
						SG: []verbs.SGE{verbs.SGEOf(c.mr, wr)}, RemoteAddr: verbs.AddrOf(sv.buf[writeAt+r*size:]), RKey: sv.mr.RKey()},
				})
				if err != nil {
					postErr <- fmt.Errorf("client QP %d round %d: %w", p, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(postErr)
	for err := range postErr {
		require.NoError(t, err)
	}
	cr, sr := <-clientDone, <-serverDone
	require.NoError(t, cr.err, "client side")
	require.NoError(t, sr.err, "server side")
	for p := range pairs {
		require.Equal(t, 2*rounds, nextSend[p], "client QP %d", p)
		require.Equal(t, 2*rounds, nextRecv[p], "server QP %d", p)
	}
	t.Logf("concurrent traffic: client %d completions in %d wake-ups (at most %d QPs a wake-up), server %d in %d (at most %d)",
		cr.st.completions, cr.st.wakeups, cr.st.maxQPs, sr.st.completions, sr.st.wakeups, sr.st.maxQPs)
	quiet(t, client.cq, 10*time.Millisecond)
	quiet(t, server.cq, 10*time.Millisecond)

	// One arm, one event: a waiter blocked on the server's channel wakes
	// once for SENDs on every QP, and the CQ then yields all of them.
	drainEvents(server)
	for p, sv := range server.eps {
		postRecv(t, sv, sharedTag(p, 1000), 0, size)
	}
	require.NoError(t, server.cq.ReqNotify(false))
	n, err := server.cq.Poll(make([]verbs.WC, 1))
	require.NoError(t, err)
	require.Zero(t, n, "a completion before the SENDs")
	woke := make(chan error, 1)
	go func() {
		cq, err := server.cc.GetEvent()
		if err == nil {
			server.cc.AckEvents(cq, 1)
			if cq != server.cq {
				err = errors.New("the event names another CQ")
			}
		}
		woke <- err
	}()
	for p, c := range client.eps {
		postSend(t, c, verbs.SendWR{WRID: sharedTag(p, 1000), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:size])}})
	}
	seen := map[int]bool{}
	for _, w := range s.poll(t, client.cq, pairs) {
		p := client.pairOf(w.QPNum)
		require.GreaterOrEqual(t, p, 0, "completion %+v", w)
		require.Equal(t, sharedTag(p, 1000), w.WRID)
		require.Equal(t, verbs.WCSuccess, w.Status)
		seen[p] = true
	}
	require.Len(t, seen, pairs)
	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-time.After(s.cfg.Timeout):
		_ = server.cc.SetDeadline(time.Now())
		<-woke
		t.Fatal("no event for SENDs on every QP of an armed shared CQ")
	}
	clear(seen)
	for _, w := range s.poll(t, server.cq, pairs) {
		p := server.pairOf(w.QPNum)
		require.GreaterOrEqual(t, p, 0, "completion %+v", w)
		require.Equal(t, sharedTag(p, 1000), w.WRID)
		require.Equal(t, verbs.WCSuccess, w.Status)
		require.False(t, seen[p], "QP %d completed twice", p)
		seen[p] = true
	}
	require.Len(t, seen, pairs, "one wake-up drains the completions of every QP")
	require.NoError(t, server.cc.SetDeadline(time.Now().Add(30*time.Millisecond)))
	_, err = server.cc.GetEvent()
	require.True(t, isDeadline(err), "a second event without a new arm: %v", err)
	require.NoError(t, server.cc.SetDeadline(time.Time{}))
}

// testSharedCQFlushOne: on a shared CQ, a QP moved to ERR flushes its own
// WRs, with its QP number, and nothing of the others; the others go on,
// also once the QP is destroyed.
func testSharedCQFlushOne(t *testing.T, s *suite) {
	const pairs, size = 16, 64
	const victimRecv, victimSend = 5, 9 // a server QP and a client QP moved to ERR
	o := defaultOpts()
	o.memSize = 64 << 10
	client, server := s.sharedPairs(t, pairs, 1024, o)
	for p, sv := range server.eps {
		if p == victimSend {
			continue // its SENDs wait for a receive (RNR) until the flush
		}
		for k := 0; k < 4; k++ {
			postRecv(t, sv, sharedTag(p, k), k*size, size)
		}
	}
	// round sends one SEND on each pair in live and checks both sides'
	// completions: each QP once, with its number and wr_id.
	round := func(live []int, k int) {
		t.Helper()
		for _, p := range live {
			c := client.eps[p]
			postSend(t, c, verbs.SendWR{WRID: sharedTag(p, 100+k), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:size])}})
		}
		for _, side := range []struct {
			sd   *sharedSide
			wrid func(p int) uint64
		}{{client, func(p int) uint64 { return sharedTag(p, 100+k) }}, {server, func(p int) uint64 { return sharedTag(p, k) }}} {
			seen := map[int]bool{}
			for _, w := range s.poll(t, side.sd.cq, len(live)) {
				p := side.sd.pairOf(w.QPNum)
				require.GreaterOrEqual(t, p, 0, "completion %+v", w)
				require.Equal(t, verbs.WCSuccess, w.Status, "completion %+v", w)
				require.Equal(t, side.wrid(p), w.WRID, "QP %d", p)
				require.False(t, seen[p], "QP %d completed twice", p)
				seen[p] = true
			}
			for _, p := range live {
				require.True(t, seen[p], "QP %d did not complete", p)
			}
		}
		quiet(t, client.cq, 5*time.Millisecond)
		quiet(t, server.cq, 5*time.Millisecond)
	}
	var first, others []int
	for p := range pairs {
		if p != victimSend {
			first = append(first, p)
		}
		if p != victimRecv && p != victimSend {
			others = append(others, p)
		}
	}
	round(first, 0)

	// The server's victim has receives 1 to 3 posted; the client's victim
	// two SENDs its peer has no receive for.
	c9 := client.eps[victimSend]
	for k := 0; k < 2; k++ {
		postSend(t, c9, verbs.SendWR{WRID: sharedTag(victimSend, 200+k), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{verbs.SGEOf(c9.mr, c9.buf[:size])}})
	}
	quiet(t, client.cq, 20*time.Millisecond)
	require.NoError(t, server.eps[victimRecv].qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	require.NoError(t, c9.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	for i, w := range s.poll(t, server.cq, 3) {
		require.Equal(t, verbs.WCWRFlushErr, w.Status, "completion %+v", w)
		require.Equal(t, server.eps[victimRecv].qp.Num(), w.QPNum, "a flush names its own QP")
		require.Equal(t, sharedTag(victimRecv, 1+i), w.WRID)
	}
	for i, w := range s.poll(t, client.cq, 2) {
		require.Equal(t, verbs.WCWRFlushErr, w.Status, "completion %+v", w)
		require.Equal(t, c9.qp.Num(), w.QPNum, "a flush names its own QP")
		require.Equal(t, sharedTag(victimSend, 200+i), w.WRID)
	}
	quiet(t, server.cq, 20*time.Millisecond)
	quiet(t, client.cq, 20*time.Millisecond)
	// The other QPs of both CQs go on.
	round(others, 1)
	// Destroying the victims leaves the CQs to the others.
	server.eps[victimRecv].release(t)
	c9.release(t)
	round(others, 2)
}

// testSharedCQOverrun: more completions than a shared CQ holds make its
// Poll fail with ErrCQOverrun and move every QP that feeds it to ERR, not
// only the one whose completion did not fit (IBV_EVENT_CQ_ERR on
// hardware; the completions are lost).
func testSharedCQOverrun(t *testing.T, s *suite) {
	const pairs = 4
	o := defaultOpts()
	o.memSize = 64 << 10
	client, server := s.sharedPairs(t, pairs, 8, o)
	n := client.cq.Cap() + 4
	require.LessOrEqual(t, n, 2*o.cap.MaxSendWR, "the CQ (%d) is larger than two send queues", client.cq.Cap())
	// Two of the four QPs fill the CQ; the other two post nothing.
	for p := 0; p < 2; p++ {
		c, sv := client.eps[p], server.eps[p]
		for i := p; i < n; i += 2 {
			postSend(t, c, verbs.SendWR{WRID: sharedTag(p, i), Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}, RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()})
		}
	}
	deadline := time.Now().Add(s.cfg.Timeout)
	for p, c := range client.eps {
		for {
			a, err := c.qp.Query()
			require.NoError(t, err)
			if a.State == verbs.QPSErr {
				break
			}
			require.True(t, time.Now().Before(deadline), "QP %d not in ERR after an overrun of the CQ it shares", p)
			time.Sleep(time.Millisecond)
		}
	}
	_, err := client.cq.Poll(make([]verbs.WC, 1))
	require.ErrorIs(t, err, verbs.ErrCQOverrun)
	// The other side's CQ is not touched.
	n, err = server.cq.Poll(make([]verbs.WC, 1))
	require.NoError(t, err)
	require.Zero(t, n)
}
