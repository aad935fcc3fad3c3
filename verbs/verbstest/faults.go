package verbstest

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("RemoteAccessBadRKey", testRemoteAccessBadRKey)
	register("RemoteAccessBounds", testRemoteAccessBounds)
	register("RemoteAccessFlags", testRemoteAccessFlags)
	register("DeregThenRemoteAccess", testDeregThenRemoteAccess)
	register("LocalProtection", testLocalProtection)
	register("RNRRetryExceeded", testRNRRetryExceeded)
	register("RNRWriteWithImm", testRNRWriteWithImm)
	register("RNRRecovers", testRNRRecovers)
	register("RecvTooSmall", testRecvTooSmall)
	register("CQOverrun", testCQOverrun)
	register("CQEvents", testCQEvents)
	register("CompChannelClose", testCompChannelClose)
	register("TransportRetryExceeded", testTransportRetryExceeded)
	register("ZeroAllocDataPath", testZeroAllocDataPath)
	register("ListenerRobustness", testListenerRobustness)
}

// remoteFault posts wr (expected to fail at the responder) followed by two
// SENDs, and checks the requester's completions: the fault, then flushes;
// and that both QPs end in ERR, as on hardware.
func (s *suite) remoteFault(t *testing.T, c, sv *endpoint, wr verbs.SendWR, want verbs.WCStatus) {
	t.Helper()
	wr.WRID = 100
	wr.Flags |= verbs.SendSignaled
	postSend(t, c, wr)
	for i := 0; i < 2; i++ {
		postSend(t, c, verbs.SendWR{WRID: uint64(101 + i), Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:4])}})
	}
	wcs := s.poll(t, c.scq, 3)
	require.Equal(t, uint64(100), wcs[0].WRID)
	require.Equal(t, want, wcs[0].Status, "got %v", wcs[0].Status)
	for i, wc := range wcs[1:] {
		require.Equal(t, uint64(101+i), wc.WRID)
		require.Equal(t, verbs.WCWRFlushErr, wc.Status, "after an error every outstanding WR flushes")
	}
	a, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)
	// A WR posted afterwards flushes too.
	postSend(t, c, verbs.SendWR{WRID: 200, Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:4])}})
	require.Equal(t, uint64(200), s.pollOne(t, c.scq, verbs.WCWRFlushErr).WRID)
}

func testRemoteAccessBadRKey(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	s.remoteFault(t, c, sv, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey() ^ 0x5a5a00}, verbs.WCRemAccessErr)
}

func testRemoteAccessBounds(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	end := verbs.AddrOf(sv.buf) + uint64(len(sv.buf))
	s.remoteFault(t, c, sv, verbs.SendWR{Opcode: verbs.OpRDMARead, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: end - 32, RKey: sv.mr.RKey()}, verbs.WCRemAccessErr)
}

func testRemoteAccessFlags(t *testing.T, s *suite) {
	o := defaultOpts()
	o.access = verbs.AccessLocalWrite | verbs.AccessRemoteRead // no REMOTE_WRITE
	c, sv := s.pair(t, o)
	// READ is allowed...
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	// ...WRITE is not.
	s.remoteFault(t, c, sv, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()}, verbs.WCRemAccessErr)
	a, err := sv.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State, "the responder's QP goes to ERR too")
}

func testDeregThenRemoteAccess(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	rkey := sv.mr.RKey()
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: rkey})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.NoError(t, sv.mr.Dereg())
	sv.mr = nil
	s.remoteFault(t, c, sv, verbs.SendWR{Opcode: verbs.OpRDMAWrite, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: rkey}, verbs.WCRemAccessErr)
}

func testLocalProtection(t *testing.T, s *suite) {
	c, _ := s.pair(t, defaultOpts())
	bad := verbs.SGEOf(c.mr, c.buf[:64])
	bad.LKey ^= 0x5a5a00
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{bad}})
	// Devices differ: mlx5 reports LOC_PROT_ERR, rxe LOC_QP_OP_ERR.
	wc := s.poll(t, c.scq, 1)[0]
	require.Contains(t, []verbs.WCStatus{verbs.WCLocProtErr, verbs.WCLocQPOpErr}, wc.Status, "got %v", wc.Status)
	require.Equal(t, uint64(1), wc.WRID)
	a, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)
}

func rnrOpts(retry int) pairOpts {
	o := defaultOpts()
	// IB CM: each side's rnr_retry is the count its peer asked for.
	o.connect.RNRRetryCount = retry
	o.accept.RNRRetryCount = retry
	return o
}

func testRNRRetryExceeded(t *testing.T, s *suite) {
	c, _ := s.pair(t, rnrOpts(1))
	s.remoteFaultNoRecv(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])}})
}

func testRNRWriteWithImm(t *testing.T, s *suite) {
	c, sv := s.pair(t, rnrOpts(1))
	// WRITE_WITH_IMM consumes a receive: without one it is RNR too.
	s.remoteFaultNoRecv(t, c, verbs.SendWR{Opcode: verbs.OpRDMAWriteWithImm, Imm: 1, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()})
}

func (s *suite) remoteFaultNoRecv(t *testing.T, c *endpoint, wr verbs.SendWR) {
	t.Helper()
	wr.WRID = 7
	wr.Flags = verbs.SendSignaled
	s.failThenFlush(t, c, wr, verbs.WCRNRRetryExcErr)
}

// failThenFlush posts wr, which must fail with status, and a SEND behind it
// on e, and checks the completions: wr's error, then the SEND flushed; the
// QP is in ERR.
func (s *suite) failThenFlush(t *testing.T, e *endpoint, wr verbs.SendWR, status verbs.WCStatus) {
	t.Helper()
	require.NoError(t, e.qp.PostSend([]verbs.SendWR{wr,
		{WRID: wr.WRID + 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[:4])}}}))
	wcs := s.poll(t, e.scq, 2)
	require.Equal(t, wr.WRID, wcs[0].WRID)
	require.Equal(t, status, wcs[0].Status, "got %v", wcs[0].Status)
	require.Equal(t, wr.WRID+1, wcs[1].WRID)
	require.Equal(t, verbs.WCWRFlushErr, wcs[1].Status)
	a, err := e.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)
}

func testRNRRecovers(t *testing.T, s *suite) {
	c, sv := s.pair(t, rnrOpts(7))
	for i := 0; i < 3; i++ {
		c.buf[i] = byte(i + 1)
		postSend(t, c, verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[i:i+1])}})
	}
	quiet(t, c.scq, 50e6)
	for i := 0; i < 3; i++ {
		postRecv(t, sv, uint64(i), i*64, 64)
	}
	for i, wc := range s.poll(t, c.scq, 3) {
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, uint64(i), wc.WRID)
	}
	for i, wc := range s.poll(t, sv.rcq, 3) {
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, byte(i+1), sv.buf[i*64], "data arrives once, in order")
	}
	quiet(t, sv.rcq, 10e6)
}

func testRecvTooSmall(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	postRecv(t, sv, 1, 0, 16)
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:100])}})
	// Devices differ: mlx5 reports LOC_LEN_ERR, rxe LOC_QP_OP_ERR.
	wc := s.poll(t, sv.rcq, 1)[0]
	require.Contains(t, []verbs.WCStatus{verbs.WCLocLenErr, verbs.WCLocQPOpErr}, wc.Status, "got %v", wc.Status)
	require.Equal(t, uint64(1), wc.WRID)
	wc = s.poll(t, c.scq, 1)[0]
	require.Contains(t, []verbs.WCStatus{verbs.WCRemInvReqErr, verbs.WCRemOpErr}, wc.Status, "got %v", wc.Status)
	a, err := sv.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State, "the receiver's QP after its error completion")
}

func testCQOverrun(t *testing.T, s *suite) {
	o := defaultOpts()
	o.cqe = 4
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	n := c.scq.Cap() + 4
	wr := verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()}
	for i := 0; i < n; i++ {
		require.NoError(t, c.qp.PostSend([]verbs.SendWR{wr}))
	}
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(s.cfg.Timeout)
	for {
		time.Sleep(time.Millisecond)
		a, err := c.qp.Query()
		require.NoError(t, err)
		if a.State == verbs.QPSErr {
			break
		}
		require.True(t, time.Now().Before(deadline), "QP not in ERR after a CQ overrun")
	}
	_, err := c.scq.Poll(wc)
	require.ErrorIs(t, err, verbs.ErrCQOverrun)
}

func testCQEvents(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	got := make(chan verbs.CQ, 4)
	errc := make(chan error, 4)
	wait := func() {
		go func() {
			cq, err := sv.cc.GetEvent()
			if err != nil {
				errc <- err
				return
			}
			sv.cc.AckEvents(cq, 1)
			got <- cq
		}()
	}
	require.NoError(t, sv.rcq.ReqNotify(false))
	wait()
	for i := 0; i < 3; i++ {
		postRecv(t, sv, uint64(i), i*64, 64)
	}
	for i := 0; i < 3; i++ {
		postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	}
	select {
	case cq := <-got:
		require.Equal(t, sv.rcq, cq)
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("no completion event")
	}
	s.poll(t, sv.rcq, 3)
	// One event per arm: three completions gave one event.
	wait()
	postRecv(t, sv, 9, 0, 64)
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	s.pollOne(t, sv.rcq, verbs.WCSuccess)
	select {
	case <-got:
		t.Fatal("an event without arming the CQ")
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(30 * time.Millisecond):
	}
	// Arming with completions already queued does not fire for them. The
	// send's own completion says the receive's is queued: the responder
	// completes a receive before it acknowledges the SEND (soft, rxe), and
	// the requester completes the send on that acknowledgement.
	postRecv(t, sv, 10, 0, 64)
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.NoError(t, sv.rcq.ReqNotify(false))
	s.pollOne(t, sv.rcq, verbs.WCSuccess)
	select {
	case <-got:
		t.Fatal("an event for a completion queued before arming")
	case <-time.After(30 * time.Millisecond):
	}
	// The next completion after arming fires.
	postRecv(t, sv, 11, 0, 64)
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	select {
	case cq := <-got:
		require.Equal(t, sv.rcq, cq)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("no completion event after re-arming")
	}
}

func testCompChannelClose(t *testing.T, s *suite) {
	ctx := s.device(t)
	cc, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	s.closeUnblocks(t, func() error {
		_, err := cc.GetEvent()
		return err
	}, cc.Close)
}

func testTransportRetryExceeded(t *testing.T, s *suite) {
	if s.cfg.SilencePeer == nil {
		t.Skip("provider offers no way to silence a peer")
	}
	// 4.096 us * 2^12 = 16.8 ms per try, 2 retries, set before connecting
	// (rdma_set_option and the connection parameters): an RTS QP refuses
	// the change (ModifyRTSTransport).
	o := defaultOpts()
	o.ackTimeout = 12
	o.connect.RetryCount = 2
	c, sv := s.pair(t, o)
	a, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, 12, a.Timeout, "the QP's Timeout after rdma_set_option(ACK_TIMEOUT)")
	require.Equal(t, 2, a.RetryCnt, "the QP's RetryCnt after the connect's retry_count")
	s.cfg.SilencePeer(t, sv.qp)
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()})
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:4])}})
	wcs := s.poll(t, c.scq, 2)
	require.Equal(t, verbs.WCRetryExcErr, wcs[0].Status, "got %v", wcs[0].Status)
	require.Equal(t, verbs.WCWRFlushErr, wcs[1].Status)
}

func testZeroAllocDataPath(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	write := []verbs.SendWR{{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:4096])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()}}
	send := []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:32])}}}
	recv := []verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(sv.mr, sv.buf[:64])}}}
	wc := make([]verbs.WC, 8)
	round := func() {
		if err := c.qp.PostSend(write); err != nil {
			panic(err)
		}
		spinOne(c.scq, wc)
		if err := sv.qp.PostRecv(recv); err != nil {
			panic(err)
		}
		if err := c.qp.PostSend(send); err != nil {
			panic(err)
		}
		spinOne(c.scq, wc)
		spinOne(sv.rcq, wc)
	}
	round() // warm up
	allocs := testing.AllocsPerRun(200, round)
	require.Zero(t, allocs, "posting, the transfer and polling allocate nothing")
}

// spinOne polls cq into wc until a completion comes, and panics unless it
// succeeded: the wait inside a round that testing.AllocsPerRun measures,
// where a require check would allocate.
func spinOne(cq verbs.CQ, wc []verbs.WC) {
	for {
		n, err := cq.Poll(wc)
		if err != nil || n > 0 {
			if err != nil || wc[0].Status != verbs.WCSuccess {
				panic("completion failed")
			}
			return
		}
		runtime.Gosched() // let the provider's goroutines run
	}
}

func testListenerRobustness(t *testing.T, s *suite) {
	// A soft listener is a TCP port at the RDMA address: whatever arrives
	// there that is not a handshake must not disturb it.
	if !s.cfg.TCPListener {
		t.Skip("the provider's listener is not a TCP port")
	}
	lch, lid := s.listener(t)
	addr := lid.LocalAddr().String()
	var junk []net.Conn
	defer func() {
		for _, c := range junk {
			c.Close()
		}
	}()
	for _, payload := range []string{"", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "SRDM\x01\x01\xff\xff", "SRDM\x01\x01\x04\x00abcd", "\x00\x00\x00\x00\x00\x00\x00\x00"} {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		junk = append(junk, nc)
		if payload != "" {
			_, _ = nc.Write([]byte(payload))
		}
	}
	// A real connection still gets through, and no junk produced an event.
	s.pairOn(t, lch, lid, defaultOpts())
	_, err := lch.GetEvent(time.Now().Add(20 * time.Millisecond))
	require.True(t, isDeadline(err), "junk must not produce events: %v", err)
}

func init() {
	register("EventThenPoll", testEventThenPoll)
	register("SharedCompChannel", testSharedCompChannel)
}

// waitEvent is waitCQ with a time limit, for tests.
func (s *suite) waitEvent(t *testing.T, cq verbs.CQ, cc verbs.CompChannel) verbs.WC {
	t.Helper()
	type res struct {
		wc  verbs.WC
		err error
	}
	done := make(chan res, 1)
	go func() {
		wc := make([]verbs.WC, 1)
		_, err := waitCQ(cq, cc, wc)
		done <- res{wc[0], err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		return r.wc
	case <-time.After(s.cfg.Timeout):
		t.Fatal("no completion event")
	}
	return verbs.WC{}
}

func testEventThenPoll(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	wr := verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:64])},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()}
	postSend(t, c, wr)
	require.Equal(t, verbs.WCSuccess, s.waitEvent(t, c.scq, c.cc).Status)
	// A consumer that waited for an event once may poll from then on:
	// completions keep coming.
	for i := 0; i < 20; i++ {
		postSend(t, c, wr)
		s.pollOne(t, c.scq, verbs.WCSuccess)
	}
}

func testSharedCompChannel(t *testing.T, s *suite) {
	// Two connections whose server CQs share one completion channel.
	lch, lid := s.listener(t)
	o := defaultOpts()
	o.sharedCQ = true
	var servers []*endpoint
	var clients []*endpoint
	var cc verbs.CompChannel
	for i := 0; i < 2; i++ {
		o.beforeConn = func(_, sv *endpoint) {
			if cc == nil {
				cc = sv.cc
			} else {
				// Move this server's CQ onto the first one's channel.
				require.NoError(t, sv.qp.Destroy())
				require.NoError(t, sv.scq.Destroy())
				var err error
				sv.scq, err = sv.id.Context().CreateCQ(o.cqe, cc)
				require.NoError(t, err)
				sv.rcq = sv.scq
				sv.qp, err = sv.id.CreateQP(sv.pd, &verbs.QPInitAttr{SendCQ: sv.scq, RecvCQ: sv.scq, Cap: o.cap})
				require.NoError(t, err)
			}
			postRecv(t, sv, uint64(i), 0, 64)
		}
		c, sv := s.pairOn(t, lch, lid, o)
		servers = append(servers, sv)
		clients = append(clients, c)
	}
	for _, sv := range servers {
		require.NoError(t, sv.scq.ReqNotify(false))
	}
	for i, c := range clients {
		c.buf[0] = byte(10 + i)
		postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:1])}})
	}
	got := map[verbs.CQ]bool{}
	deadline := time.Now().Add(s.cfg.Timeout)
	for len(got) < 2 {
		done := make(chan verbs.CQ, 1)
		go func() {
			cq, err := cc.GetEvent()
			if err == nil {
				cc.AckEvents(cq, 1)
			}
			done <- cq
		}()
		select {
		case cq := <-done:
			require.NotNil(t, cq)
			got[cq] = true
		case <-time.After(time.Until(deadline)):
			t.Fatalf("events from %d of 2 CQs", len(got))
		}
	}
	for i, sv := range servers {
		require.Equal(t, uint64(i), s.pollOne(t, sv.rcq, verbs.WCSuccess).WRID)
		require.Equal(t, byte(10+i), sv.buf[0])
	}
}

func init() { register("SolicitedEvents", testSolicitedEvents) }

func testSolicitedEvents(t *testing.T, s *suite) {
	o := defaultOpts()
	o.sharedCQ = true
	c, sv := s.pair(t, o)
	got := make(chan error, 1)
	go func() {
		cq, err := sv.cc.GetEvent()
		if err == nil {
			sv.cc.AckEvents(cq, 1)
		}
		got <- err
	}()
	require.NoError(t, sv.rcq.ReqNotify(true))
	postRecv(t, sv, 1, 0, 64)
	postRecv(t, sv, 2, 64, 64)
	sg := []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, SG: sg})
	require.Equal(t, uint64(1), s.pollOne(t, sv.rcq, verbs.WCSuccess).WRID)
	select {
	case <-got:
		t.Fatal("an unsolicited receive fired a solicited-only arm")
	case <-time.After(30 * time.Millisecond):
	}
	postSend(t, c, verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendSolicited, SG: sg})
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(s.cfg.Timeout):
		t.Fatal("a solicited receive did not fire the event")
	}
	require.Equal(t, uint64(2), s.pollOne(t, sv.rcq, verbs.WCSuccess).WRID)
}
