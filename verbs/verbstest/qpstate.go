package verbstest

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("QPStateMachine", testQPStateMachine)
	register("ModifyToErrFlushes", testModifyToErrFlushes)
	register("ModifyRTSTransport", testModifyRTSTransport)
	register("PostLimits", testPostLimits)
	register("SendQueueFull", testSendQueueFull)
}

// unconnected creates an ID bound to the suite's address with a QP on it.
func (s *suite) unconnected(t *testing.T) *endpoint {
	e := &endpoint{ch: s.channel(t)}
	var err error
	e.id, err = e.ch.CreateID()
	require.NoError(t, err)
	require.NoError(t, e.id.BindAddr(s.addr(0)))
	o := defaultOpts()
	o.memSize = 1 << 16
	s.resources(t, e, &o)
	t.Cleanup(func() { e.release(t) })
	return e
}

func postErr(t *testing.T, err error, errno syscall.Errno, index int) {
	t.Helper()
	require.Error(t, err)
	require.True(t, errors.Is(err, errno), "want %v, got %v", errno, err)
	var pe *verbs.PostError
	require.True(t, errors.As(err, &pe), "%T is not a *verbs.PostError", err)
	require.Equal(t, index, pe.Index)
}

func testQPStateMachine(t *testing.T, s *suite) {
	e := s.unconnected(t)
	a, err := e.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSInit, a.State)
	sg := []verbs.SGE{verbs.SGEOf(e.mr, e.buf[:8])}
	// Below RTS a send is refused; a receive is accepted from INIT on.
	postErr(t, e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, SG: sg}}), syscall.EINVAL, 0)
	require.NoError(t, e.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SG: sg}}))
	// Invalid transitions are refused.
	require.Error(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState), "INIT -> RTS")
	// Any state -> ERR, which flushes.
	require.NoError(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	wc := s.pollOne(t, e.rcq, verbs.WCWRFlushErr)
	require.Equal(t, uint64(1), wc.WRID)
	a, err = e.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)
	// RESET refuses receives; RESET -> RTR skips INIT and is refused.
	require.NoError(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	a, err = e.qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSReset, a.State)
	postErr(t, e.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SG: sg}}), syscall.EINVAL, 0)
	require.Error(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState), "RESET -> RTR")
	quiet(t, e.rcq, 10e6)
	// Out-of-range attributes are refused.
	require.Error(t, e.qp.Modify(&verbs.QPAttr{RetryCnt: 8}, verbs.QPAttrRetryCnt))
	require.Error(t, e.qp.Modify(&verbs.QPAttr{RNRRetry: 9}, verbs.QPAttrRNRRetry))
}

func testModifyToErrFlushes(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	for i := 0; i < 3; i++ {
		postRecv(t, c, uint64(10+i), i*64, 64)
	}
	// A SEND the peer cannot take (no receive posted, RNR retried forever)
	// stays outstanding until the flush.
	postSend(t, c, verbs.SendWR{WRID: 20, Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	postSend(t, c, verbs.SendWR{WRID: 21, Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}})
	quiet(t, c.scq, 20e6)
	require.NoError(t, c.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	// Every outstanding WR completes with WR_FLUSH_ERR, signaled or not, in order.
	for i, wc := range s.poll(t, c.rcq, 3) {
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
		require.Equal(t, uint64(10+i), wc.WRID)
	}
	for i, wc := range s.poll(t, c.scq, 2) {
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
		require.Equal(t, uint64(20+i), wc.WRID)
	}
	// Posting to a QP in ERR completes at once with a flush error.
	if why := s.cfg.RecvInErrUnflushed; why != "" {
		t.Logf("not checked on %s: a receive posted in ERR is flushed (%s)", s.cfg.Provider, why)
		return
	}
	postRecv(t, c, 30, 0, 64)
	require.Equal(t, uint64(30), s.pollOne(t, c.rcq, verbs.WCWRFlushErr).WRID)
	_ = sv
}

func testPostLimits(t *testing.T, s *suite) {
	o := defaultOpts()
	o.cap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 32}
	c, sv := s.pair(t, o)
	a, err := c.qp.Query()
	require.NoError(t, err)
	sge := verbs.SGEOf(c.mr, c.buf[:4])
	many := make([]verbs.SGE, a.Cap.MaxSendSGE+1)
	for i := range many {
		many[i] = sge
	}
	ok := verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{sge},
		RemoteAddr: verbs.AddrOf(sv.buf), RKey: sv.mr.RKey()}
	bad := ok
	bad.SG = many
	// The WR before the bad one is posted; the error names the bad one.
	postErr(t, c.qp.PostSend([]verbs.SendWR{ok, bad}), syscall.EINVAL, 1)
	s.pollOne(t, c.scq, verbs.WCSuccess)

	rmany := make([]verbs.SGE, a.Cap.MaxRecvSGE+1)
	for i := range rmany {
		rmany[i] = verbs.SGEOf(c.mr, c.buf[i*8:i*8+8])
	}
	postErr(t, c.qp.PostRecv([]verbs.RecvWR{{SG: rmany}}), syscall.EINVAL, 0)

	inl := make([]byte, a.Cap.MaxInlineData+1)
	big := verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendInline, SG: []verbs.SGE{{Addr: verbs.AddrOf(inl), Length: uint32(len(inl))}}}
	postErr(t, c.qp.PostSend([]verbs.SendWR{big}), syscall.EINVAL, 0)
	// At the limit inline works.
	postRecv(t, sv, 5, 0, 4096)
	big.SG[0].Length = uint32(a.Cap.MaxInlineData)
	big.Flags |= verbs.SendSignaled
	fill(inl, 6)
	postSend(t, c, big)
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, uint32(a.Cap.MaxInlineData), s.pollOne(t, sv.rcq, verbs.WCSuccess).ByteLen)
	require.Equal(t, inl[:a.Cap.MaxInlineData], sv.buf[:a.Cap.MaxInlineData])
}

func testSendQueueFull(t *testing.T, s *suite) {
	o := defaultOpts()
	o.cap.MaxSendWR = 8
	c, _ := s.pair(t, o)
	a, err := c.qp.Query()
	require.NoError(t, err)
	// SENDs to a peer with no receive posted stay outstanding (RNR, retried
	// forever), so the queue fills.
	wr := verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}}
	for i := 0; i < a.Cap.MaxSendWR; i++ {
		postSend(t, c, wr)
	}
	postErr(t, c.qp.PostSend([]verbs.SendWR{wr}), syscall.ENOMEM, 0)
}

// The transport timeout and retry counts belong to the RTR->RTS transition
// (ib_modify_qp_is_ok): an RTS QP refuses them with EINVAL, and SetAckTimeout
// with the connection parameters is how they are chosen. MIN_RNR_TIMER is
// one an RTS QP may change.
func testModifyRTSTransport(t *testing.T, s *suite) {
	c, _ := s.pair(t, defaultOpts())
	before, err := c.qp.Query()
	require.NoError(t, err)
	for _, m := range []verbs.QPAttrMask{verbs.QPAttrTimeout, verbs.QPAttrRetryCnt, verbs.QPAttrRNRRetry} {
		err := c.qp.Modify(&verbs.QPAttr{Timeout: 12, RetryCnt: 2, RNRRetry: 2}, m)
		require.ErrorIs(t, err, syscall.EINVAL, "mask %#x on an RTS QP", m)
	}
	after, err := c.qp.Query()
	require.NoError(t, err)
	require.Equal(t, before.Timeout, after.Timeout)
	require.Equal(t, before.RetryCnt, after.RetryCnt)
	require.Equal(t, verbs.QPSRTS, after.State)
	require.NoError(t, c.qp.Modify(&verbs.QPAttr{MinRNRTimer: 1}, verbs.QPAttrMinRNRTimer))
}
