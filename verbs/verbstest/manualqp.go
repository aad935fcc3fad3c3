package verbstest

import (
	"bytes"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// QPs without the connection manager (PD.CreateQP): the state machine with
// the kernel's rules on which attributes each transition requires and
// allows, and data between two such QPs connected by what their programs
// exchange (QP number, PSN, LID, GID), as rc_pingpong and perftest do.

func init() {
	register("ManualQPStateMachine", testManualQPStateMachine)
	register("ManualQPData", testManualQPData)
	register("ManualQPAccessFlags", testManualQPAccessFlags)
}

// manualEnd is one side of a pair of QPs connected without the CM.
type manualEnd struct {
	ctx      verbs.Context
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	mem      *verbs.Memory
	mr       verbs.MR
	buf      []byte
	// What the program sends its peer.
	lid      uint16
	gid      verbs.GID
	gidIndex int
	psn      uint32
	mtu      verbs.MTU
}

// manualDevice opens the provider's first device and gives it an address
// (Config.PrepareDevice), as a program does once.
func (s *suite) manualDevice(t *testing.T) verbs.Context {
	ctx := s.device(t)
	if s.cfg.PrepareDevice != nil {
		s.cfg.PrepareDevice(t, ctx)
	}
	return ctx
}

// manualEnd creates a QP in RESET with its CQs, memory and MR on ctx, and
// reads what the peer needs to reach it: the port's LID and active MTU,
// and the GID (with its index) of the suite's address.
func (s *suite) manualEnd(t *testing.T, ctx verbs.Context, psn uint32) *manualEnd {
	e := &manualEnd{ctx: ctx, psn: psn}
	var err error
	e.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.pd.Dealloc()) })
	e.scq, err = ctx.CreateCQ(64, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.scq.Destroy()) })
	e.rcq, err = ctx.CreateCQ(64, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.rcq.Destroy()) })
	e.mem = memory(t, 1<<20)
	e.buf = e.mem.Bytes()[:1<<20]
	e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.mr.Dereg()) })
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.qp.Destroy()) })
	port, err := ctx.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, verbs.PortActive, port.State)
	e.lid, e.mtu = port.LID, port.ActiveMTU
	e.gid, e.gidIndex = s.localGID(t, ctx, port.GIDTblLen)
	return e
}

// localGID finds the GID of the suite's address in the port's GID table
// (RoCE v2 lists each IP address of the netdev; soft has its one address).
func (s *suite) localGID(t *testing.T, ctx verbs.Context, n int) (verbs.GID, int) {
	want := ipGID(s.cfg.IP)
	for i := 0; i < n; i++ {
		g, err := ctx.QueryGID(1, i)
		if err != nil {
			continue // an empty entry
		}
		if g == want {
			return g, i
		}
	}
	t.Fatalf("no GID of port 1 is %v", s.cfg.IP)
	return verbs.GID{}, 0
}

func (e *manualEnd) query(t *testing.T) verbs.QPAttr {
	t.Helper()
	a, err := e.qp.Query()
	require.NoError(t, err)
	return a
}

// Attributes of each transition, as a program sets them for a peer.
func initAttr(access verbs.Access) (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: 1, AccessFlags: access},
		verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
}

func rtrAttr(e, peer *manualEnd) (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{State: verbs.QPSRTR, PathMTU: min(e.mtu, peer.mtu), DestQPNum: peer.qp.Num(), RQPSN: peer.psn,
			MaxDestRdAtomic: 4, MinRNRTimer: 12,
			AH: verbs.AHAttr{DLID: peer.lid, IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: peer.gid, SGIDIndex: e.gidIndex, HopLimit: 1}}},
		verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
}

func rtsAttr(e *manualEnd) (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: e.psn, MaxRdAtomic: 4},
		verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN |
			verbs.QPAttrMaxRdAtomic
}

// refused checks that Modify fails with EINVAL and leaves the state alone.
func refused(t *testing.T, e *manualEnd, a verbs.QPAttr, m verbs.QPAttrMask, what string) {
	t.Helper()
	before := e.query(t).State
	err := e.qp.Modify(&a, m)
	require.ErrorIs(t, err, syscall.EINVAL, "%s (mask %v)", what, m)
	require.Equal(t, before, e.query(t).State, "%s changed the state", what)
}

// eachBit calls f with every single bit of m.
func eachBit(m verbs.QPAttrMask, f func(verbs.QPAttrMask)) {
	for b := verbs.QPAttrMask(1); b != 0; b <<= 1 {
		if m&b != 0 {
			f(b)
		}
	}
}

func testManualQPStateMachine(t *testing.T, s *suite) {
	ctx := s.manualDevice(t)
	a := s.manualEnd(t, ctx, 0x1234)
	b := s.manualEnd(t, ctx, 0xabcdef)
	require.Equal(t, verbs.QPSReset, a.query(t).State, "a new QP is in RESET")
	sg := []verbs.SGE{verbs.SGEOf(a.mr, a.buf[:8])}
	postErr(t, a.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SG: sg}}), syscall.EINVAL, 0)

	// RESET: to INIT only, with the port, P_Key index and access flags
	// (each one missing is refused, as is an attribute INIT does not take).
	ia, im := initAttr(verbs.AccessRemoteWrite | verbs.AccessRemoteRead)
	eachBit(im&^verbs.QPAttrState, func(b verbs.QPAttrMask) { refused(t, a, ia, im&^b, "RESET->INIT without "+b.String()) })
	refused(t, a, ia, im|verbs.QPAttrTimeout, "RESET->INIT with TIMEOUT")
	refused(t, a, ia, im|verbs.QPAttrPathMTU, "RESET->INIT with PATH_MTU")
	ra, rm := rtrAttr(a, b)
	refused(t, a, ra, rm, "RESET->RTR")
	refused(t, a, verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState, "RESET->ERR")
	require.NoError(t, a.qp.Modify(&ia, im))
	require.NoError(t, b.qp.Modify(&ia, im))
	q := a.query(t)
	require.Equal(t, verbs.QPSInit, q.State)
	require.Equal(t, 1, q.PortNum)
	// INIT -> INIT may change the access flags.
	ia.AccessFlags = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessLocalWrite
	require.NoError(t, a.qp.Modify(&ia, verbs.QPAttrAccessFlags))
	refused(t, a, verbs.QPAttr{Timeout: 14}, verbs.QPAttrTimeout, "INIT->INIT with TIMEOUT")
	require.NoError(t, a.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SG: sg}}), "INIT takes receives")

	// INIT -> RTR needs the path, the peer's QP number and PSN, the
	// responder resources and the RNR timer.
	eachBit(rm&^verbs.QPAttrState, func(b verbs.QPAttrMask) { refused(t, a, ra, rm&^b, "INIT->RTR without "+b.String()) })
	refused(t, a, ra, rm|verbs.QPAttrSQPSN, "INIT->RTR with SQ_PSN")
	refused(t, a, ra, rm|verbs.QPAttrTimeout, "INIT->RTR with TIMEOUT")
	ta, tm := rtsAttr(a)
	refused(t, a, ta, tm, "INIT->RTS")
	require.NoError(t, a.qp.Modify(&ra, rm))
	q = a.query(t)
	require.Equal(t, verbs.QPSRTR, q.State)
	require.Equal(t, b.qp.Num(), q.DestQPNum)
	require.Equal(t, min(a.mtu, b.mtu), q.PathMTU)
	postErr(t, a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, SG: sg}}), syscall.EINVAL, 0)

	// RTR -> RTS needs the ack timeout, both retry counts, the SQ PSN and
	// the initiator depth; RTR is no state to stay in.
	eachBit(tm&^verbs.QPAttrState, func(b verbs.QPAttrMask) { refused(t, a, ta, tm&^b, "RTR->RTS without "+b.String()) })
	refused(t, a, ta, tm|verbs.QPAttrDestQPN, "RTR->RTS with DEST_QPN")
	refused(t, a, verbs.QPAttr{MinRNRTimer: 3}, verbs.QPAttrMinRNRTimer, "RTR->RTR")
	require.NoError(t, a.qp.Modify(&ta, tm))
	q = a.query(t)
	require.Equal(t, verbs.QPSRTS, q.State)
	require.Equal(t, 14, q.Timeout)
	require.Equal(t, 7, q.RetryCnt)

	// RTS -> RTS may change the RNR timer and access flags, not the
	// transport's timeout and retries.
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{MinRNRTimer: 3}, verbs.QPAttrMinRNRTimer))
	refused(t, a, verbs.QPAttr{Timeout: 10}, verbs.QPAttrTimeout, "RTS->RTS with TIMEOUT")
	refused(t, a, ra, rm, "RTS->RTR")

	// Any state -> ERR (which flushes), ERR -> RESET; ERR goes nowhere else.
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	require.Equal(t, uint64(1), s.pollOne(t, a.rcq, verbs.WCWRFlushErr).WRID)
	require.Equal(t, verbs.QPSErr, a.query(t).State)
	refused(t, a, ta, tm, "ERR->RTS")
	refused(t, a, ia, im, "ERR->INIT")
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	require.Equal(t, verbs.QPSReset, a.query(t).State)
	// INIT -> ERR and INIT -> RESET.
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
	require.NoError(t, b.qp.Modify(&ia, im))
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
}

// connectManual moves a and b to RTS with each other's parameters, a
// first all the way, as two programs that are not in step.
func connectManual(t *testing.T, a, b *manualEnd, access verbs.Access) {
	ia, im := initAttr(access)
	for _, e := range []*manualEnd{a, b} {
		require.NoError(t, e.qp.Modify(&ia, im))
	}
	ra, rm := rtrAttr(a, b)
	require.NoError(t, a.qp.Modify(&ra, rm))
	ta, tm := rtsAttr(a)
	require.NoError(t, a.qp.Modify(&ta, tm))
	rb, rbm := rtrAttr(b, a)
	require.NoError(t, b.qp.Modify(&rb, rbm))
	tb, tbm := rtsAttr(b)
	require.NoError(t, b.qp.Modify(&tb, tbm))
}

// manualPair is two QPs, on two openings of the device (two programs'),
// connected by what each reported.
func (s *suite) manualPair(t *testing.T, access verbs.Access) (a, b *manualEnd) {
	a = s.manualEnd(t, s.manualDevice(t), 0x10203)
	b = s.manualEnd(t, s.manualDevice(t), 0xfffff0) // wraps at 2^24 within the test
	connectManual(t, a, b, access)
	return a, b
}

func testManualQPData(t *testing.T, s *suite) {
	for _, order := range []string{"AFirst", "BFirst"} {
		t.Run(order, func(t *testing.T) {
			a, b := s.manualPair(t, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			if order == "BFirst" {
				a, b = b, a
			}
			// SEND/RECV both ways, more than 16 so that the PSNs go past
			// 2^24 on b's side.
			for i := 0; i < 20; i++ {
				postRecvManual(t, b, uint64(100+i), b.buf[i*64:i*64+64])
				postRecvManual(t, a, uint64(200+i), a.buf[i*64:i*64+64])
				msg := a.buf[4096+i*64 : 4096+i*64+40]
				fill(msg, byte(i))
				postSendManual(t, a, verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
					SG: []verbs.SGE{verbs.SGEOf(a.mr, msg)}})
				require.Equal(t, uint64(i), s.pollOne(t, a.scq, verbs.WCSuccess).WRID)
				wc := s.pollOne(t, b.rcq, verbs.WCSuccess)
				require.Equal(t, uint64(100+i), wc.WRID)
				require.Equal(t, uint32(40), wc.ByteLen)
				require.Equal(t, msg, b.buf[i*64:i*64+40])
				back := b.buf[8192+i*64 : 8192+i*64+24]
				fill(back, byte(i+50))
				postSendManual(t, b, verbs.SendWR{WRID: uint64(300 + i), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
					SG: []verbs.SGE{verbs.SGEOf(b.mr, back)}})
				s.pollOne(t, b.scq, verbs.WCSuccess)
				require.Equal(t, uint64(200+i), s.pollOne(t, a.rcq, verbs.WCSuccess).WRID)
				require.Equal(t, back, a.buf[i*64:i*64+24])
			}
			// WRITE a buffer into b, READ it back into another, compare.
			src := a.buf[1<<16 : 1<<16+100000]
			fill(src, 77)
			dst := b.buf[1<<17 : 1<<17+100000]
			postSendManual(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(a.mr, src)}, RemoteAddr: verbs.AddrOf(dst), RKey: b.mr.RKey()})
			require.Equal(t, verbs.WCRDMAWrite, s.pollOne(t, a.scq, verbs.WCSuccess).Opcode)
			require.True(t, bytes.Equal(src, dst), "the WRITE's bytes are not in the peer's memory")
			back := a.buf[1<<18 : 1<<18+100000]
			postSendManual(t, a, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(a.mr, back)}, RemoteAddr: verbs.AddrOf(dst), RKey: b.mr.RKey()})
			wc := s.pollOne(t, a.scq, verbs.WCSuccess)
			require.Equal(t, verbs.WCRDMARead, wc.Opcode)
			require.Equal(t, uint32(len(back)), wc.ByteLen)
			require.True(t, bytes.Equal(src, back), "the READ brought back other bytes")
		})
	}
}

// A QP's access flags bound what its peer may do, whatever the MR allows:
// an operation they leave out is an invalid request (rxe's answer, the IB
// specification's for an operation the QP does not support).
func testManualQPAccessFlags(t *testing.T, s *suite) {
	a, b := s.manualPair(t, verbs.AccessRemoteRead) // no remote write
	dst := b.buf[:64]
	fillByte(dst, 0)
	src := a.buf[:64]
	fill(src, 1)
	postSendManual(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(a.mr, a.buf[128:192])}, RemoteAddr: verbs.AddrOf(dst), RKey: b.mr.RKey()})
	s.pollOne(t, a.scq, verbs.WCSuccess)
	postSendManual(t, a, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(a.mr, src)}, RemoteAddr: verbs.AddrOf(dst), RKey: b.mr.RKey()})
	s.pollOne(t, a.scq, verbs.WCRemInvReqErr)
	require.Equal(t, -1, indexOther(dst, 0), "a WRITE the QP does not allow reached memory")
}

func postRecvManual(t *testing.T, e *manualEnd, wrid uint64, b []byte) {
	t.Helper()
	require.NoError(t, e.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SG: []verbs.SGE{verbs.SGEOf(e.mr, b)}}}))
}

func postSendManual(t *testing.T, e *manualEnd, wr verbs.SendWR) {
	t.Helper()
	require.NoError(t, e.qp.PostSend([]verbs.SendWR{wr}))
}

// ipGID is the GID of an IP address (IPv4 mapped into IPv6, as RoCE v2).
func ipGID(ip net.IP) verbs.GID {
	var g verbs.GID
	copy(g[:], ip.To16())
	return g
}
