package rdma

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// rawPeer speaks the verbs directly, to play a peer that breaks the
// protocol in ways this package never would.
type rawPeer struct {
	ech  verbs.EventChannel
	id   verbs.CMID
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mem  *verbs.Memory
	mr   verbs.MR
	peer hello // the listener's hello, once established
}

const rawRingLog = 16

func (r *rawPeer) wait(t *testing.T, want verbs.CMEventType) verbs.CMEvent {
	t.Helper()
	ev, err := r.ech.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, want, ev.Type, "status %d", ev.Status)
	return ev
}

// dialRaw connects to ln with the private data made by pd from a valid
// hello, and returns the peer and the event that ended the connect.
func dialRaw(t *testing.T, ln *Listener, pd func(h hello) []byte) (*rawPeer, verbs.CMEvent) {
	t.Helper()
	p, err := verbs.Lookup(ProviderSoft)
	require.NoError(t, err)
	r := &rawPeer{}
	r.ech, err = p.CreateEventChannel()
	require.NoError(t, err)
	r.id, err = r.ech.CreateID()
	require.NoError(t, err)
	t.Cleanup(r.close)
	require.NoError(t, r.id.ResolveAddr(nil, ln.Addr().(*Addr).tcpAddr(), 2*time.Second))
	r.wait(t, verbs.EventAddrResolved)
	require.NoError(t, r.id.ResolveRoute(2*time.Second))
	r.wait(t, verbs.EventRouteResolved)
	ctx := r.id.Context()
	r.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	r.cq, err = ctx.CreateCQ(64, nil)
	require.NoError(t, err)
	r.qp, err = r.id.CreateQP(r.pd, &verbs.QPInitAttr{
		SendCQ: r.cq, RecvCQ: r.cq, SignalAll: true,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64},
	})
	require.NoError(t, err)
	r.mem, err = verbs.AllocMemory(1<<rawRingLog + stream.MailboxLen) // the ring and its mailbox
	require.NoError(t, err)
	r.mr, err = r.pd.RegMR(r.mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	recvs := make([]verbs.RecvWR, 16)
	require.NoError(t, r.qp.PostRecv(recvs))
	h := hello{version: protoVersion, recvDepth: 16, ringAddr: r.mr.Addr(), ringKey: r.mr.RKey(), ringLog: rawRingLog}
	require.NoError(t, r.id.Connect(&verbs.ConnParam{PrivateData: pd(h), RetryCount: 7, RNRRetryCount: 7}))
	ev, err := r.ech.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	if ev.Type == verbs.EventEstablished {
		r.peer, err = parseHello(ev.Param.PrivateData)
		require.NoError(t, err)
	}
	return r, ev
}

// marshalHello is the valid hello, unchanged.
func marshalHello(h hello) []byte { return h.marshal() }

// write RDMA-writes payload with immediate imm at offset off of the
// listener side's ring.
func (r *rawPeer) write(t *testing.T, off uint64, payload []byte, imm uint32) {
	t.Helper()
	buf := r.mem.Bytes()[:len(payload)]
	copy(buf, payload)
	var sg []verbs.SGE
	if len(payload) > 0 {
		sg = []verbs.SGE{verbs.SGEOf(r.mr, buf)}
	}
	require.NoError(t, r.qp.PostSend([]verbs.SendWR{{
		Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled, SG: sg, Imm: imm,
		RemoteAddr: r.peer.ringAddr + off, RKey: r.peer.ringKey,
	}}))
}

func (r *rawPeer) close() {
	if r.qp != nil {
		r.id.Disconnect()
		r.qp.Destroy()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
	if r.mem != nil {
		r.mem.Free()
	}
	r.id.Destroy()
	r.ech.Close()
}

// A connect whose hello is malformed is rejected; the listener serves on
// and Accept never sees it.
func TestMalformedHello(t *testing.T) {
	ln := listen(t, softConfig())
	cases := map[string]func(h hello) []byte{
		"empty":     func(h hello) []byte { return nil },
		"garbage":   func(h hello) []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n") },
		"truncated": func(h hello) []byte { return h.marshal()[:20] },
		"bad crc": func(h hello) []byte {
			b := h.marshal()
			b[9] ^= 0xff
			return b
		},
		"version 0": func(h hello) []byte {
			h.version = 0
			return h.marshal()
		},
		"ring 2^40": func(h hello) []byte {
			h.ringLog = 40
			return h.marshal()
		},
		"depth 2": func(h hello) []byte {
			h.recvDepth = 2
			return h.marshal()
		},
	}
	for name, pd := range cases {
		t.Run(name, func(t *testing.T) {
			_, ev := dialRaw(t, ln, pd)
			require.Equal(t, verbs.EventRejected, ev.Type)
			assert.Equal(t, byte(rejectBadHello), parseReject(ev.Param.PrivateData))
		})
	}
	testsupport.Serves(t, ln, dialer(ln, nil))
}

// A dialer whose listener answers with a malformed hello fails the dial.
func TestDialRejectsBadAccept(t *testing.T) {
	p, err := verbs.Lookup(ProviderSoft)
	require.NoError(t, err)
	ech, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer ech.Close()
	id, err := ech.CreateID()
	require.NoError(t, err)
	defer id.Destroy()
	require.NoError(t, id.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}))
	require.NoError(t, id.Listen(4))
	go func() {
		ev, err := ech.GetEvent(time.Now().Add(10 * time.Second))
		if err != nil || ev.Type != verbs.EventConnectRequest {
			return
		}
		ctx := ev.ID.Context()
		pd, _ := ctx.AllocPD()
		cq, _ := ctx.CreateCQ(16, nil)
		qp, err := ev.ID.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return
		}
		ev.ID.Accept(&verbs.ConnParam{PrivateData: []byte("this is not a hello at all, but it is long enough")})
		ech.GetEvent(time.Now().Add(5 * time.Second)) // established
		ech.GetEvent(time.Now().Add(5 * time.Second)) // disconnected by the dialer
		qp.Destroy()
		cq.Destroy()
		pd.Dealloc()
		ev.ID.Destroy()
	}()
	d := Dialer{Config: softConfig(), Timeout: 10 * time.Second}
	_, err = d.Dial("rdma", id.LocalAddr().String())
	require.Error(t, err)
	assert.True(t, errors.Is(err, errHello), "%v", err)
	var oe *net.OpError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "dial", oe.Op)
}

// readProtocolError reads s to its end, which must be a protocol error,
// and returns that error.
func readProtocolError(t *testing.T, s net.Conn) error {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(s)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.EPROTO), "%v", err)
	return err
}

// A peer that sends garbage immediate values gets its connection failed
// with a protocol error; nothing panics and the listener serves on.
func TestGarbageImm(t *testing.T) {
	ln := listen(t, softConfig())
	ring := uint64(defaultRingSize)
	cases := []struct {
		name    string
		off     uint64
		payload []byte
		imm     uint32
	}{
		{"reserved kind", 0, nil, 3 << immKindShift},
		{"zero-length data", 0, nil, immData(0)},
		{"length mismatch", 0, []byte("0123456789"), immData(20)},
		{"beyond window", 0, nil, immData(int(ring) + 1)},
		{"credit for unsent bytes", 0, nil, immCredit(0, 1000)},
		{"credit for unposted receives", 0, nil, immCredit(1000, 0)},
		{"unknown control", 0, nil, immCtl(77)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, s := acceptRaw(t, ln, marshalHello)
			r.write(t, tc.off, tc.payload, tc.imm)
			err := readProtocolError(t, s)
			var oe *net.OpError
			require.True(t, errors.As(err, &oe))
			assert.Equal(t, "read", oe.Op)
		})
	}
	// Data then a FIN from a peer that speaks the verbs itself: the data, then io.EOF.
	t.Run("data then fin", func(t *testing.T) {
		r, s := acceptRaw(t, ln, marshalHello)
		r.write(t, 0, []byte("hello"), immData(5))
		r.write(t, 0, nil, immCtl(ctlFin))
		got, err := io.ReadAll(s)
		require.NoError(t, err)
		assert.Equal(t, "hello", string(got))
	})
	testsupport.Serves(t, ln, dialer(ln, nil))
}

// failingDevice is a device whose AllocPD fails: newConn must give back
// what it set up before (memory) and return the error, not panic.
type failingDevice struct{ verbs.Context }

func (failingDevice) Query() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{MaxQPWR: 1024, MaxCQE: 4096, MaxInlineData: 64}, nil
}
func (failingDevice) AllocPD() (verbs.PD, error) {
	return nil, verbs.Errorf("ibv_alloc_pd", syscall.ENOMEM, "test")
}

type idOnDevice struct {
	verbs.CMID
	ctx verbs.Context
}

func (i idOnDevice) Context() verbs.Context { return i.ctx }

func TestNewConnFailureCleansUp(t *testing.T) {
	_, err := newConn("test", nil, idOnDevice{ctx: failingDevice{}}, softConfig().withDefaults(), true)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ENOMEM), "%v", err)
	_, err = newConn("test", nil, idOnDevice{}, softConfig().withDefaults(), true)
	require.Error(t, err, "an ID without a device")
}
