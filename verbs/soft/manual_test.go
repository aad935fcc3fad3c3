package soft_test

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// manualSide is a bound device with one QP from PD.CreateQP in INIT.
type manualSide struct {
	ctx verbs.Context
	cq  verbs.CQ
	pd  verbs.PD
	qp  verbs.QP
	mem *verbs.Memory
	mr  verbs.MR
	lid uint16
	gid verbs.GID
}

func newManualSide(t *testing.T) *manualSide {
	p, err := verbs.Lookup(soft.Name)
	require.NoError(t, err)
	m := &manualSide{}
	m.ctx, err = p.Open(soft.DeviceName)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.ctx.Close()) })
	bindLoopback(t, m.ctx)
	m.pd, err = m.ctx.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.pd.Dealloc()) })
	m.cq, err = m.ctx.CreateCQ(32, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.cq.Destroy()) })
	m.mem, err = verbs.AllocMemory(1 << 16)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.mem.Free()) })
	m.mr, err = m.pd.RegMR(m.mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.mr.Dereg()) })
	m.qp, err = m.pd.CreateQP(&verbs.QPInitAttr{SendCQ: m.cq, RecvCQ: m.cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.qp.Destroy()) })
	pa, err := m.ctx.QueryPort(1)
	require.NoError(t, err)
	m.lid = pa.LID
	m.gid, err = m.ctx.QueryGID(1, 0)
	require.NoError(t, err)
	require.NoError(t, m.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags))
	return m
}

func (m *manualSide) toRTR(t *testing.T, peer *manualSide) {
	require.NoError(t, m.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU4096, DestQPNum: peer.qp.Num(),
		RQPSN: 7, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AH: verbs.AHAttr{DLID: peer.lid, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: peer.gid}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
}

func (m *manualSide) toRTS(t *testing.T) {
	require.NoError(t, m.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxRdAtomic))
}

// post posts wr and waits for its completion, which must have status want.
func (m *manualSide) post(t *testing.T, wr verbs.SendWR, want verbs.WCStatus) {
	t.Helper()
	require.NoError(t, m.qp.PostSend([]verbs.SendWR{wr}))
	wc := m.completion(t)
	require.Equal(t, want, wc.Status, "%v", wc.Status)
}

// completion waits for one completion on m's CQ.
func (m *manualSide) completion(t *testing.T) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := m.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			return wc[0]
		}
		require.True(t, time.Now().Before(deadline), "no completion")
		time.Sleep(time.Millisecond)
	}
}

// waiterAndDialer makes two sides and says which one waits for the
// other's connection (the one whose LID and QP number sort higher: both
// have the same GID).
func waiterAndDialer(t *testing.T) (waiter, dialer *manualSide) {
	a, b := newManualSide(t), newManualSide(t)
	if a.lid < b.lid || a.lid == b.lid && a.qp.Num() < b.qp.Num() {
		return b, a
	}
	return a, b
}

// refusedSilently dials addr, writes msg and checks that the listener
// closes the connection without a byte, within the handshake timeout.
func refusedSilently(t *testing.T, addr string, msg []byte, within time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	if msg != nil {
		_, err = c.Write(msg)
		require.NoError(t, err)
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
	n, err := io.ReadFull(c, make([]byte, 1))
	require.Zero(t, n, "the listener answered")
	require.ErrorIs(t, err, io.EOF, "the listener did not close the connection in time")
}

// A client of a device's listener gets nothing unless it is the peer a QP
// in RTR expects: not an answer, nor whether the QP exists. The real peer
// connects afterwards.
func TestManualListenerHostile(t *testing.T) {
	prev := soft.SetHandshakeTimeout(300 * time.Millisecond)
	defer soft.SetHandshakeTimeout(prev)
	w, d := waiterAndDialer(t)
	w.toRTR(t, d)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(w.lid)))
	other := verbs.GID(netip.MustParseAddr("::ffff:127.0.0.2").As16())
	cases := map[string][]byte{
		"silent":          nil,
		"junk":            bytes.Repeat([]byte{0xff}, 200),
		"CM request":      soft.RawREQ(1, nil),
		"no such QP":      soft.RawQPHello(0xfffff, d.qp.Num(), d.lid, d.gid),
		"wrong QP number": soft.RawQPHello(w.qp.Num(), d.qp.Num()+1, d.lid, d.gid),
		"wrong LID":       soft.RawQPHello(w.qp.Num(), d.qp.Num(), d.lid+1, d.gid),
		"wrong GID":       soft.RawQPHello(w.qp.Num(), d.qp.Num(), d.lid, other),
		"QP not in RTR":   soft.RawQPHello(d.qp.Num(), w.qp.Num(), w.lid, w.gid),
		"short":           soft.RawQPHello(w.qp.Num(), d.qp.Num(), d.lid, d.gid)[:20],
	}
	for name, msg := range cases {
		t.Run(name, func(t *testing.T) { refusedSilently(t, addr, msg, 2*time.Second) })
	}
	// A hello from the right QP number, LID and GID over a connection from
	// another address is refused too.
	t.Run("other source address", func(t *testing.T) {
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
		c, err := dl.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(soft.RawQPHello(w.qp.Num(), d.qp.Num(), d.lid, d.gid))
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, err := io.ReadFull(c, make([]byte, 1))
		require.Zero(t, n)
		require.ErrorIs(t, err, io.EOF)
	})
	// The peer itself connects, and data flows.
	w.toRTS(t)
	d.toRTR(t, w)
	d.toRTS(t)
	buf := d.mem.Bytes()[:64]
	copy(buf, "hello over a QP without the CM")
	require.NoError(t, d.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(d.mr, buf)}, RemoteAddr: w.mr.Addr(), RKey: w.mr.RKey()}}))
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := d.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no completion")
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, verbs.WCSuccess, wc[0].Status)
	require.Equal(t, buf, w.mem.Bytes()[:64])
	// Now connected, the QP takes no second connection, even from its peer.
	refusedSilently(t, addr, soft.RawQPHello(w.qp.Num(), d.qp.Num(), d.lid, d.gid), 2*time.Second)
}

// A dialing QP whose peer never comes completes what was posted with
// RETRY_EXC_ERR after its retries, as on a NIC.
func TestManualPeerAbsent(t *testing.T) {
	w, d := waiterAndDialer(t)
	d.toRTR(t, w)
	require.NoError(t, d.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 10, RetryCnt: 1, RNRRetry: 7, SQPSN: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxRdAtomic))
	buf := d.mem.Bytes()[:8]
	require.NoError(t, d.qp.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(d.mr, buf)}, RemoteAddr: w.mr.Addr(), RKey: w.mr.RKey()}}))
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := d.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no completion")
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, verbs.WCRetryExcErr, wc[0].Status)
}

// Bind's rules: one address per device, a specific one, not on the CM's
// device; RTR before Bind says what is missing.
func TestManualBind(t *testing.T) {
	p, err := verbs.Lookup(soft.Name)
	require.NoError(t, err)
	ctx, err := p.Open(soft.DeviceName)
	require.NoError(t, err)
	defer ctx.Close()
	require.Error(t, soft.Bind(ctx, netip.MustParseAddrPort("0.0.0.0:0")))
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(4, nil)
	require.NoError(t, err)
	defer cq.Destroy()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1}})
	require.NoError(t, err)
	defer qp.Destroy()
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1},
		verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags))
	g := verbs.GID(netip.MustParseAddr("::ffff:127.0.0.1").As16())
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPNum: 5,
		AH: verbs.AHAttr{DLID: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: g}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	require.ErrorContains(t, err, "soft.Bind")
	require.NoError(t, soft.Bind(ctx, netip.MustParseAddrPort("127.0.0.1:0")))
	require.Error(t, soft.Bind(ctx, netip.MustParseAddrPort("127.0.0.1:0")), "a second address")
	gid, err := ctx.QueryGID(1, 0)
	require.NoError(t, err)
	require.Equal(t, g, gid)
	pa, err := ctx.QueryPort(1)
	require.NoError(t, err)
	require.NotZero(t, pa.LID)
}
