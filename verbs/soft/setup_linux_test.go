package soft

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// The connection setup's order: a listener reports a request offering
// shared memory while it answers the offer, Accept picks what the answer
// settled, and a request rejected or destroyed meanwhile leaves nothing.

// setupListener listens on ip and returns its event channel.
func setupListener(t *testing.T, ip net.IP) (*eventChannel, *cmID) {
	t.Helper()
	ch := newEventChannel()
	id := newCMID(ch)
	require.NoError(t, id.BindAddr(&net.TCPAddr{IP: ip}))
	require.NoError(t, id.Listen(4))
	t.Cleanup(func() { id.Destroy(); ch.Close() })
	return ch, id
}

// rawClient dials the listener and sends req on the connection; it returns
// the connection and its transport, for reading the listener's answer.
func rawClient(t *testing.T, lid *cmID, req func(c *net.TCPConn) hsMsg) (*net.TCPConn, *tcpTransport) {
	t.Helper()
	c, err := net.DialTCP("tcp", nil, lid.LocalAddr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	tr, err := newTCPTransport(c)
	require.NoError(t, err)
	m := req(c)
	b, err := m.marshal()
	require.NoError(t, err)
	_, err = c.Write(b)
	require.NoError(t, err)
	return c, tr
}

// answer reads the listener's answer to a REQ, past its MRA.
func answer(t *testing.T, tr *tcpTransport) hsMsg {
	t.Helper()
	require.NoError(t, tr.setReadDeadline(time.Now().Add(10*time.Second)))
	m, err := readHandshake(tr)
	require.NoError(t, err)
	if m.typ == msgMRA {
		m, err = readHandshake(tr)
		require.NoError(t, err)
	}
	return m
}

func getEvent(t *testing.T, ch *eventChannel, want verbs.CMEventType) verbs.CMEvent {
	t.Helper()
	ev, err := ch.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, want, ev.Type, "status %d", ev.Status)
	return ev
}

// acceptOn gives a request a QP, posts a receive and accepts it.
func acceptOn(t *testing.T, id verbs.CMID) (verbs.QP, verbs.CQ) {
	t.Helper()
	qp, cq := qpOn(t, id)
	require.NoError(t, qp.PostRecv([]verbs.RecvWR{{WRID: 7}}))
	require.NoError(t, id.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	return qp, cq
}

// qpOn gives id a small QP with its own PD and CQ, all destroyed with the
// ID when the test ends.
func qpOn(t *testing.T, id verbs.CMID) (verbs.QP, verbs.CQ) {
	t.Helper()
	ctx := id.Context()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(8, nil)
	require.NoError(t, err)
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { qp.Destroy(); cq.Destroy(); pd.Dealloc(); id.Destroy() })
	return qp, cq
}

// ringsOpen counts this process's descriptors of soft ring memfds.
func ringsOpen(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "/memfd:rdma-soft-ring") {
			n++
		}
	}
	return n
}

// eventually waits up to 10 s for cond.
func eventually(cond func() bool) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// A request offering shared memory is reported first, its offer answered
// while the consumer sets up; the REP picking shared memory goes out
// without waiting for the active side's ring (here held until the test
// lets go), and Accept returns once that ring came. A request rejected or
// destroyed meanwhile has the ring its answer made freed.
func TestShmAnswerOverlapsTheConsumer(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	for _, end := range []string{"accept", "reject", "destroy"} {
		t.Run(end, func(t *testing.T) {
			prev := SetSharedMemory(true)
			defer SetSharedMemory(prev)
			before := ringsOpen(t)
			ch, lid := setupListener(t, net.IPv4(127, 0, 0, 74))
			held := make(chan struct{})
			served := make(chan struct{})
			_, tr := rawClient(t, lid, func(c *net.TCPConn) hsMsg {
				// The active side's socket, which takes the token and the
				// listener's ring, then waits to be released before it
				// answers with its own (a small one, as offered).
				name := shmSocketName(c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr))
				ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
				require.NoError(t, err)
				go func() {
					defer close(served)
					defer ln.Close()
					uc, err := ln.AcceptUnix()
					if err != nil {
						return
					}
					defer uc.Close()
					var b [16 + shmSetupLen]byte
					fds, err := recvFDs(uc, b[:], 2)
					if err != nil {
						return
					}
					peer, err := peerSetup(b[16:], fds, shmRingMin)
					if err != nil {
						return
					}
					defer peer.free()
					<-held
					local, err := newShmLocal(shmRingMin)
					if err != nil {
						return
					}
					defer local.free()
					_ = sendSetup(uc, local)
				}()
				return hsMsg{typ: msgREQ, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7,
					transports: transportTCP | transportShm | reqTakesMRA,
					ext:        (&shmOfferExt{version: 3, bootID: bootID(), ringSize: shmRingMin}).marshal()}
			})
			ev := getEvent(t, ch, verbs.EventConnectRequest)
			req := ev.ID.(*cmID)
			require.NotNil(t, req.shmDone, "a request offering shared memory waits for its answer")
			switch end {
			case "accept":
				accepted := make(chan struct{})
				go func() {
					defer close(accepted)
					acceptOn(t, req)
				}()
				m := answer(t, tr)
				require.Equal(t, uint8(msgREP), m.typ)
				assert.Equal(t, uint32(transportShm), m.transports, "the REP picks the rings being exchanged")
				select {
				case <-accepted:
					t.Fatal("Accept returned before the active side's ring came")
				default:
				}
				close(held)
				<-accepted
				req.Disconnect()
			case "reject":
				require.NoError(t, req.Reject(nil))
				close(held)
				assert.Equal(t, uint8(msgREJ), answer(t, tr).typ)
			case "destroy":
				require.NoError(t, req.Destroy())
				close(held)
				assert.Equal(t, uint8(msgREJ), answer(t, tr).typ)
			}
			<-served
			require.True(t, eventually(func() bool { return ringsOpen(t) == before }),
				"%d ring memfds open, %d before", ringsOpen(t), before)
			if end == "reject" {
				require.NoError(t, req.Destroy())
			}
		})
	}
}

// With a real version 3 offer (a dialler from before version 4), the
// request is accepted on shared memory: the answer made while the request
// waited is the one Accept picks. A version 4 offer is answered "TCP now,
// shared memory to follow".
func TestShmAcceptPicksTheOverlappedAnswer(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	prev := SetSharedMemory(true)
	defer SetSharedMemory(prev)
	for _, v := range []struct {
		version uint8
		ip      net.IP
		rep     uint32
	}{{3, net.IPv4(127, 0, 0, 75), transportShm}, {4, net.IPv4(127, 0, 0, 77), transportShmSwitch}} {
		t.Run(fmt.Sprintf("v%d", v.version), func(t *testing.T) {
			ch, lid := setupListener(t, v.ip)
			var offer *shmOffer
			c, tr := rawClient(t, lid, func(c *net.TCPConn) hsMsg {
				offer = newShmOfferVersion(c, time.Now().Add(10*time.Second), v.version)
				require.NotNil(t, offer)
				return hsMsg{typ: msgREQ, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7,
					transports: transportTCP | transportShm | reqTakesMRA, ext: offer.extension()}
			})
			defer offer.abort()
			ev := getEvent(t, ch, verbs.EventConnectRequest)
			acceptOn(t, ev.ID)
			m := answer(t, tr)
			require.Equal(t, uint8(msgREP), m.typ)
			require.Equal(t, v.rep, m.transports)
			if v.version == 3 {
				st, err := offer.finish(c)
				require.NoError(t, err)
				st.close()
			} // version 4: the exchange waits for the connection's invitation
			ev.ID.Disconnect()
		})
	}
}

// A soft connection accepted is handed out before its RTU; one whose RTU
// never comes fails within twice the handshake timeout: a connect error
// event, and its receives flushed.
func TestAcceptedWithoutRTUFails(t *testing.T) {
	prevT := SetHandshakeTimeout(200 * time.Millisecond)
	defer SetHandshakeTimeout(prevT)
	ch, lid := setupListener(t, net.IPv4(127, 0, 0, 76))
	_, tr := rawClient(t, lid, func(*net.TCPConn) hsMsg {
		return hsMsg{typ: msgREQ, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7,
			transports: transportTCP | reqTakesMRA}
	})
	ev := getEvent(t, ch, verbs.EventConnectRequest)
	_, cq := acceptOn(t, ev.ID)
	require.Equal(t, uint8(msgREP), answer(t, tr).typ)
	// No RTU: the connection fails well before the default 10 s.
	fail, err := ch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventConnectError, fail.Type)
	wc := make([]verbs.WC, 1)
	require.True(t, eventually(func() bool { n, _ := cq.Poll(wc); return n == 1 }))
	assert.Equal(t, uint64(7), wc[0].WRID)
	assert.Equal(t, verbs.WCWRFlushErr, wc[0].Status)
}

// A connect that waits 300 ms for its answer is established although the
// listener's consumer holds its request for a second: the MRA tells it to
// wait on, and the RTU that follows the late answer is not held to the
// connect's passed deadline (on the default same-host path it is written
// at once).
func TestConnectWaitsForAHeldRequest(t *testing.T) {
	lch, lid := setupListener(t, net.IPv4(127, 0, 0, 77))
	ch := newEventChannel()
	t.Cleanup(func() { ch.Close() })
	id := newCMID(ch)
	require.NoError(t, id.ResolveAddr(nil, lid.LocalAddr(), 300*time.Millisecond))
	getEvent(t, ch, verbs.EventAddrResolved)
	require.NoError(t, id.ResolveRoute(300*time.Millisecond))
	getEvent(t, ch, verbs.EventRouteResolved)
	qp, _ := qpOn(t, id)
	t.Cleanup(func() { id.Disconnect() })
	require.NoError(t, id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	ev := getEvent(t, lch, verbs.EventConnectRequest)
	time.Sleep(time.Second)
	acceptOn(t, ev.ID)
	getEvent(t, ch, verbs.EventEstablished)
	require.NoError(t, qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}}))
}

// Every offer version parses to what was marshalled; versions 3 and 4
// name a ring size within the limits, and the offers this side makes are
// version 4.
func TestShmOfferVersions(t *testing.T) {
	boot := "0123456789abcdef0123456789abcdef0123"
	for _, o := range []shmOfferExt{
		{version: 2, bootID: boot, token: [16]byte{9}},
		{version: 3, bootID: boot, token: [16]byte{9}, ringSize: shmRingMin},
		{version: 3, bootID: boot, token: [16]byte{9}, ringSize: shmRingMax},
		{version: 4, bootID: boot, token: [16]byte{9}, ringSize: shmRingMin},
		{version: 4, bootID: boot, token: [16]byte{9}, ringSize: shmRingMax},
	} {
		got, err := parseShmOffer(o.marshal())
		require.NoError(t, err)
		require.Equal(t, o, got)
	}
	for _, version := range []uint8{3, 4} {
		for _, size := range []uint32{0, shmRingMin / 2, shmRingMin + 4096, shmRingMax * 2} {
			_, err := parseShmOffer((&shmOfferExt{version: version, bootID: boot, ringSize: size}).marshal())
			require.Error(t, err, "version %d ring size %d", version, size)
		}
	}
	if active, _ := tcpPair(t); bootID() != "" {
		o := newShmOffer(active, time.Now().Add(time.Second))
		require.NotNil(t, o)
		defer o.abort()
		got, err := parseShmOffer(o.extension())
		require.NoError(t, err)
		require.Equal(t, uint8(4), got.version)
		require.Equal(t, uint32(shmRingSize.Load()), got.ringSize)
	}
}
