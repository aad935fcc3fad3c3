//go:build linux

package soft

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// ackEnd is one of two QPs whose engines talk over a loopback TCP
// connection, as two connected soft QPs do, with memory registered for
// their SGEs.
type ackEnd struct {
	q   *qp
	cq  *cq
	mr  verbs.MR
	buf []byte
}

// newAckPair connects two QPs over TCP; delayed says whether both agreed
// to delayed ACKs (hsDelayedAcks).
func newAckPair(t testing.TB, delayed bool) (a, b *ackEnd) {
	t.Helper()
	a, b, startB := newAckPairHeld(t, delayed)
	startB()
	return a, b
}

// newAckPairHeld is newAckPair with b's receiver not yet started: what a
// sends waits in the socket until startB.
func newAckPairHeld(t testing.TB, delayed bool) (a, b *ackEnd, startB func()) {
	t.Helper()
	ca, cb := loopbackPair(t)
	ends := [2]*ackEnd{}
	for i, c := range []transport{mustTCP(t, ca), mustTCP(t, cb)} {
		ctx := &device{}
		p, err := ctx.AllocPD()
		require.NoError(t, err)
		cqi, err := ctx.CreateCQ(256, nil)
		require.NoError(t, err)
		q, err := newQP(p.(*pd), &verbs.QPInitAttr{SendCQ: cqi, RecvCQ: cqi,
			Cap: verbs.QPCap{MaxSendWR: 129, MaxRecvWR: 128, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		mem, err := verbs.AllocMemory(4096)
		require.NoError(t, err)
		m, err := p.RegMR(mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
		require.NoError(t, err)
		q.mu.Lock()
		q.state = verbs.QPSRTS
		q.mu.Unlock()
		q.start(c, &hsMsg{qpn: 1, sqDepth: 129, delayedAcks: delayed}, nil)
		if i == 0 {
			q.startReceiver(nil)
		}
		t.Cleanup(func() {
			_ = q.Destroy()
			_ = m.Dereg()
			_ = mem.Free()
		})
		ends[i] = &ackEnd{q: q, cq: cqi.(*cq), mr: m, buf: mem.Bytes()}
	}
	return ends[0], ends[1], func() { ends[1].q.startReceiver(nil) }
}

// loopbackPair is a TCP connection on 127.0.0.22, both ends.
func loopbackPair(t testing.TB) (active, passive *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 22)})
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		acc <- c
	}()
	active, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	passive = <-acc
	require.NotNil(t, passive)
	t.Cleanup(func() { active.Close(); passive.Close() })
	return active, passive
}

func mustTCP(t testing.TB, c *net.TCPConn) transport {
	t.Helper()
	tr, err := newTCPTransport(c)
	require.NoError(t, err)
	return tr
}

// frames is how many frames the end's transmitter has sent.
func (e *ackEnd) frames() uint64 {
	e.q.mu.Lock()
	defer e.q.mu.Unlock()
	return e.q.framesSent
}

// acked reports whether every request the end sent has been acknowledged.
func (e *ackEnd) acked() bool {
	e.q.mu.Lock()
	defer e.q.mu.Unlock()
	return e.q.snd.sqHead == e.q.snd.sqTail
}

func (e *ackEnd) postRecv(t testing.TB) {
	t.Helper()
	require.NoError(t, e.q.PostRecv([]verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[:64])}}}))
}

func (e *ackEnd) send(t testing.TB, op verbs.Opcode, flags verbs.SendFlags, raddr uint64, rkey uint32) {
	t.Helper()
	require.NoError(t, e.q.PostSend([]verbs.SendWR{{WRID: 2, Opcode: op, Flags: flags,
		SG: []verbs.SGE{verbs.SGEOf(e.mr, e.buf[64:128])}, RemoteAddr: raddr, RKey: rkey}}))
}

// await polls the end's CQ for a completion of opcode op within d.
func (e *ackEnd) await(t testing.TB, op verbs.WCOpcode, d time.Duration) {
	t.Helper()
	wc := make([]verbs.WC, 1)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		n, err := e.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			require.Equal(t, verbs.WCSuccess, wc[0].Status)
			if wc[0].Opcode == op {
				return
			}
			continue
		}
		runtime.Gosched()
	}
	t.Fatalf("no completion of opcode %v within %v", op, d)
}

// withAckDelay runs the test with ackDelay set to d.
func withAckDelay(t testing.TB, d time.Duration) {
	old := ackDelay
	ackDelay = d
	t.Cleanup(func() { ackDelay = old })
}

// On a connection whose two sides agreed to delayed ACKs, a request/
// response exchange costs each side one frame per message: each side's
// ACK rides on its next SEND instead of going alone when its receiver
// runs out of input. (ackDelay is long here, so that no timer fires.)
func TestDelayedAcksRideOnReplies(t *testing.T) {
	withAckDelay(t, time.Minute)
	a, b := newAckPair(t, true)
	const n = 200
	a.postRecv(t)
	b.postRecv(t)
	for i := 0; i < n; i++ {
		a.send(t, verbs.OpSend, 0, 0, 0)
		b.await(t, verbs.WCRecv, 10*time.Second)
		b.postRecv(t)
		b.send(t, verbs.OpSend, 0, 0, 0)
		a.await(t, verbs.WCRecv, 10*time.Second)
		a.postRecv(t)
	}
	assert.LessOrEqual(t, a.frames(), uint64(n), "the requesting side's frames for %d round trips", n)
	assert.LessOrEqual(t, b.frames(), uint64(n), "the answering side's frames for %d round trips", n)
	// Everything but the last reply was acknowledged by the next request.
	assert.True(t, b.acked() || b.q.snd.sqTail-b.q.snd.sqHead == 1)
	assert.True(t, a.acked())
}

// A signaled WR asks for its ACK (flagAckReq): with no traffic back, it
// completes at once, not after ackDelay (a minute here). So does an RDMA
// READ (its response is the ACK).
func TestDelayedAcksSignaledCompletesAtOnce(t *testing.T) {
	withAckDelay(t, time.Minute)
	a, b := newAckPair(t, true)
	raddr := uint64(verbs.AddrOf(b.buf[256:]))
	for _, op := range []verbs.Opcode{verbs.OpRDMAWrite, verbs.OpRDMAWrite, verbs.OpRDMARead} {
		start := time.Now()
		a.send(t, op, verbs.SendSignaled, raddr, b.mr.RKey())
		a.await(t, map[verbs.Opcode]verbs.WCOpcode{verbs.OpRDMAWrite: verbs.WCRDMAWrite, verbs.OpRDMARead: verbs.WCRDMARead}[op], 20*time.Second)
		assert.Less(t, time.Since(start), 20*time.Second)
	}
	b.postRecv(t)
	a.send(t, verbs.OpSend, verbs.SendSignaled, 0, 0)
	a.await(t, verbs.WCSend, 20*time.Second)
}

// An unsignaled WR with no traffic back is acknowledged once ackDelay
// has passed, by a standalone ACK: the requester's send queue empties,
// the watchdog sees progress.
func TestDelayedAcksUnsignaledAckedByTimer(t *testing.T) {
	const delay = 50 * time.Millisecond
	withAckDelay(t, delay)
	a, b := newAckPair(t, true)
	start := time.Now()
	a.send(t, verbs.OpRDMAWrite, 0, uint64(verbs.AddrOf(b.buf[256:])), b.mr.RKey())
	require.Eventually(t, a.acked, 10*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), delay, "acknowledged before ackDelay: not delayed")
	assert.Equal(t, uint64(1), b.frames(), "one standalone ACK")
}

// A signaled bind behind an unsignaled WRITE already sent completes as
// soon as the peer acknowledges the WRITE: the requester asks for that
// ACK with one of its own (and without ackDelay, a minute here).
func TestDelayedAcksSignaledBindAsksForAck(t *testing.T) {
	withAckDelay(t, time.Minute)
	a, b := newAckPair(t, true)
	a.send(t, verbs.OpRDMAWrite, 0, uint64(verbs.AddrOf(b.buf[256:])), b.mr.RKey())
	require.Eventually(t, func() bool {
		a.q.mu.Lock()
		defer a.q.mu.Unlock()
		return a.q.snd.sqSent == a.q.snd.sqTail
	}, 10*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond) // the peer executed it and went idle
	wi, err := a.q.pd.AllocMW()
	require.NoError(t, err)
	t.Cleanup(func() { _ = wi.Dealloc() })
	bind := bindOf(wi.(*mw), a.mr.(*mr), 0, 64, verbs.AccessRemoteRead)
	require.NoError(t, a.q.PostSend([]verbs.SendWR{{WRID: 9, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: bind}}))
	a.await(t, verbs.WCBindMW, 20*time.Second)
}

// Without the agreement (a peer of an earlier version), nothing changes:
// no frame asks for an ACK, and each ACK goes when the receiver runs out
// of input.
func TestNoDelayedAcksWithoutAgreement(t *testing.T) {
	withAckDelay(t, time.Minute)
	a, b := newAckPair(t, false)
	a.send(t, verbs.OpRDMAWrite, 0, uint64(verbs.AddrOf(b.buf[256:])), b.mr.RKey())
	require.Eventually(t, a.acked, 20*time.Second, time.Millisecond)
	var hb [hdrLen]byte
	q := a.q
	q.mu.Lock()
	q.snd.postSend(&verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(a.mr, a.buf[:8])}, RemoteAddr: uint64(verbs.AddrOf(b.buf[256:])), RKey: b.mr.RKey()})
	q.batch.nh, q.batch.v, q.batch.vg = 0, q.batch.v[:0], q.batch.vg[:0]
	require.True(t, q.snd.appendRequests(&q.batch, 0))
	copy(hb[:], q.batch.v[0])
	q.snd.sqSent-- // not sent after all: the transmitter sends it
	q.batch.nh, q.batch.v, q.batch.vg = 0, q.batch.v[:0], q.batch.vg[:0]
	q.snd.posted()
	q.mu.Unlock()
	var h header
	require.NoError(t, h.decode(&hb))
	assert.Zero(t, h.flags&flagAckReq, "a frame to a peer that did not agree asks for an ACK")
	a.await(t, verbs.WCRDMAWrite, 20*time.Second)
}

// The agreement rides in the transports word of the REQ and REP as
// hsDelayedAcks, beside the transport: a REP with it still picks exactly
// one transport, and a REP without it is what an earlier version sends
// and parses.
func TestHandshakeDelayedAcksBit(t *testing.T) {
	for _, typ := range []uint8{msgREQ, msgREP} {
		for _, on := range []bool{false, true} {
			m := hsMsg{typ: typ, qpn: 7, sqDepth: 4, rqDepth: 4, transports: transportTCP, delayedAcks: on}
			b, err := m.marshal()
			require.NoError(t, err)
			word := uint32(b[hsHdrLen+16]) | uint32(b[hsHdrLen+17])<<8 | uint32(b[hsHdrLen+18])<<16 | uint32(b[hsHdrLen+19])<<24
			if on {
				assert.Equal(t, uint32(transportTCP|hsDelayedAcks), word)
			} else {
				assert.Equal(t, uint32(transportTCP), word, "without the agreement the word is as before")
			}
			got, err := parseHandshake(b)
			require.NoError(t, err)
			assert.Equal(t, on, got.delayedAcks)
			assert.Equal(t, uint32(transportTCP), got.transports)
		}
	}
	two := hsMsg{typ: msgREP, qpn: 7, sqDepth: 4, rqDepth: 4, transports: transportTCP | transportShm, delayedAcks: true}
	b, err := two.marshal()
	require.NoError(t, err)
	_, err = parseHandshake(b)
	assert.Error(t, err, "a REP that picks two transports")
	none := hsMsg{typ: msgREQ, qpn: 7, sqDepth: 4, rqDepth: 4, delayedAcks: true}
	b, err = none.marshal()
	require.NoError(t, err)
	_, err = parseHandshake(b)
	assert.Error(t, err, "a REQ that offers no transport, only the flag")
}

// BenchmarkAckPingPong is a 64-byte SEND ping-pong on a QP pair over TCP
// whose consumers poll their CQs (each QP's receive role stays with its
// receiver goroutine), ACKs at once and delayed; frames/op counts both
// sides' frames per round trip.
func BenchmarkAckPingPong(b *testing.B) {
	for _, delayed := range []bool{false, true} {
		name := "immediate"
		if delayed {
			name = "delayed"
		}
		b.Run(name, func(b *testing.B) {
			x, y := newAckPair(b, delayed)
			x.postRecv(b)
			y.postRecv(b)
			start := x.frames() + y.frames()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				x.send(b, verbs.OpSend, 0, 0, 0)
				y.await(b, verbs.WCRecv, 10*time.Second)
				y.postRecv(b)
				y.send(b, verbs.OpSend, 0, 0, 0)
				x.await(b, verbs.WCRecv, 10*time.Second)
				x.postRecv(b)
			}
			b.StopTimer()
			b.ReportMetric(float64(x.frames()+y.frames()-start)/float64(b.N), "frames/op")
		})
	}
}

// Unsignaled WRs that fill half the send queue ask for their ACK (the
// peer's receiver idles between them, so its every-ackEvery rule does
// not come into it): their slots come back without waiting for ackDelay
// (a minute here).
func TestDelayedAcksFillingSendQueueAsks(t *testing.T) {
	withAckDelay(t, time.Minute)
	a, b := newAckPair(t, true)
	raddr := uint64(verbs.AddrOf(b.buf[256:]))
	half := a.q.cap.MaxSendWR / 2
	for i := 0; i < half; i++ {
		a.send(t, verbs.OpRDMAWrite, 0, raddr, b.mr.RKey())
		// The peer executes it and runs out of input before the next.
		time.Sleep(200 * time.Microsecond)
	}
	require.Eventually(t, a.acked, 20*time.Second, time.Millisecond)
}

// Requests that arrive in one read are acknowledged by one ACK frame at
// the end of that read's batch, not one every ackEvery requests in it:
// each ACK frame costs the peer a write and a wake-up, and TCP's delayed
// ACK answers a run of segments read at once the same way. (The rule on
// a connection without delayed ACKs is unchanged.)
func TestDelayedAcksOnePerReadBatch(t *testing.T) {
	withAckDelay(t, time.Minute)
	a, b, startB := newAckPairHeld(t, true)
	started := false
	defer func() {
		if !started {
			startB() // Destroy waits for the receiver
		}
	}()
	raddr := uint64(verbs.AddrOf(b.buf[256:]))
	const n = 128 // within a's send queue (129)
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpRDMAWrite,
			SG: []verbs.SGE{verbs.SGEOf(a.mr, a.buf[64:128])}, RemoteAddr: raddr, RKey: b.mr.RKey()}
	}
	require.NoError(t, a.q.PostSend(wrs))
	require.Eventually(t, func() bool { // all n in b's socket: b reads them at once
		a.q.mu.Lock()
		defer a.q.mu.Unlock()
		return a.q.snd.sqSent == a.q.snd.sqTail && !a.q.txBusy
	}, 10*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, 16, b.q.rcv.ackEvery, "an ACK every 16 requests, were they read one by one")
	startB()
	started = true
	require.Eventually(t, a.acked, 10*time.Second, time.Millisecond)
	assert.LessOrEqual(t, b.frames(), uint64(2), "one ACK for the batch, at most one more if the kernel split it")
}
