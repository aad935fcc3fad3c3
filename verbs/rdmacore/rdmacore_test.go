//go:build cgo && linux

package rdmacore

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

func TestRegistered(t *testing.T) {
	p, err := verbs.Lookup(ProviderName)
	require.NoError(t, err)
	assert.Equal(t, "rdmacore", p.Name())
}

// Without a device (this is what machines without RDMA support see), the
// provider lists nothing and says how to get going with the soft provider.
func TestNoDevice(t *testing.T) {
	if testsupport.InVM() {
		t.Skip("this machine has an RDMA device")
	}
	p, err := verbs.Lookup(ProviderName)
	require.NoError(t, err)
	devs, err := p.Devices()
	require.NoError(t, err)
	if len(devs) > 0 {
		t.Skipf("this machine has RDMA devices: %v", devs)
	}
	assert.NotNil(t, devs)
	_, err = p.Open("")
	require.Error(t, err)
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.Contains(t, err.Error(), "no RDMA device")
	assert.Contains(t, err.Error(), "RDMA_PROVIDER=soft")
	_, err = p.CreateEventChannel()
	require.Error(t, err)
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.Contains(t, err.Error(), `"soft"`)
}

func TestDeviceQuery(t *testing.T) {
	dev, _ := testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	devs, err := p.Devices()
	require.NoError(t, err)
	var found bool
	for _, d := range devs {
		if d.Name == dev {
			found = true
			assert.Equal(t, "RoCE", d.Transport)
			assert.NotZero(t, d.GUID)
		}
	}
	require.True(t, found, "device %s not in %v", dev, devs)

	_, err = p.Open("no-such-device")
	require.ErrorIs(t, err, syscall.ENODEV)

	ctx, err := p.Open(dev)
	require.NoError(t, err)
	defer ctx.Close()
	assert.Equal(t, dev, ctx.Name())
	assert.Equal(t, "rdmacore", ctx.Provider())
	attr, err := ctx.Query()
	require.NoError(t, err)
	assert.Positive(t, attr.MaxQPWR)
	assert.Positive(t, attr.MaxSGE)
	assert.Positive(t, attr.MaxCQE)
	assert.Positive(t, attr.MaxInlineData)
	assert.Equal(t, 1, attr.PhysPortCnt)
	t.Logf("%s: %+v", dev, attr)
	pa, err := ctx.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, verbs.PortActive, pa.State)
	assert.Equal(t, verbs.LinkLayerEthernet, pa.LinkLayer)
	assert.NotZero(t, pa.ActiveMTU.Bytes())
	_, err = ctx.QueryPort(0)
	assert.ErrorIs(t, err, syscall.EINVAL)
	_, err = ctx.QueryGID(1, 0)
	require.NoError(t, err)
	_, err = ctx.QueryGID(1, pa.GIDTblLen+1)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "ibv_query_gid", ve.Op)
	assert.NotEqual(t, syscall.EPERM, ve.Errno, "errno, not the -1 return value")
}

func TestRegMRRefusesGoMemory(t *testing.T) {
	dev, _ := testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	ctx, err := p.Open(dev)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	_, err = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	require.ErrorIs(t, err, syscall.EINVAL)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "ibv_reg_mr", ve.Op)

	mem, err := verbs.AllocMemory(8192)
	require.NoError(t, err)
	defer mem.Free()
	mr, err := pd.RegMR(mem.Bytes()[4096:], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	assert.Equal(t, 4096, mr.Len())
	assert.Equal(t, verbs.AddrOf(mem.Bytes()[4096:]), mr.Addr())
	// The PD is busy while the MR exists.
	require.ErrorIs(t, pd.Dealloc(), syscall.EBUSY)
	require.NoError(t, mr.Dereg())
	require.NoError(t, pd.Dealloc())
}

// end is one side of a connection in the tests.
type end struct {
	ch  verbs.EventChannel
	id  verbs.CMID
	pd  verbs.PD
	cc  verbs.CompChannel
	cq  verbs.CQ
	qp  verbs.QP
	mem *verbs.Memory
	mr  verbs.MR
}

func nextEvent(t testing.TB, ch verbs.EventChannel, want verbs.CMEventType) verbs.CMEvent {
	t.Helper()
	ev, err := ch.GetEvent(time.Now().Add(20 * time.Second))
	require.NoError(t, err)
	require.Equal(t, want, ev.Type, "event %v status %d", ev.Type, ev.Status)
	return ev
}

// setup gives e a PD, CQ with channel, QP and a registered 64 KiB buffer on id.
func (e *end) setup(t testing.TB, id verbs.CMID) {
	t.Helper()
	e.id = id
	ctx := id.Context()
	require.NotNil(t, ctx)
	var err error
	e.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	e.cc, err = ctx.CreateCompChannel()
	require.NoError(t, err)
	e.cq, err = ctx.CreateCQ(64, e.cc)
	require.NoError(t, err)
	require.GreaterOrEqual(t, e.cq.Cap(), 64)
	e.qp, err = id.CreateQP(e.pd, &verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	require.NoError(t, err)
	e.mem, err = verbs.AllocMemory(64 << 10)
	require.NoError(t, err)
	e.mr, err = e.pd.RegMR(e.mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
}

// teardown releases everything in the order the verbs require: QP, CQ,
// channel, MR, PD, ID. Each released object is forgotten, so that the
// cleanup registered by connect only releases what a failed test left.
func (e *end) teardown(t testing.TB) {
	t.Helper()
	if e.qp != nil {
		require.NoError(t, e.qp.Destroy())
		e.qp = nil
	}
	if e.cq != nil {
		require.NoError(t, e.cq.Destroy())
		e.cq = nil
	}
	if e.cc != nil {
		require.NoError(t, e.cc.Close())
		e.cc = nil
	}
	if e.mr != nil {
		require.NoError(t, e.mr.Dereg())
		e.mr = nil
	}
	if e.pd != nil {
		require.NoError(t, e.pd.Dealloc())
		e.pd = nil
	}
	if e.mem != nil {
		require.NoError(t, e.mem.Free())
		e.mem = nil
	}
	if e.id != nil {
		require.NoError(t, e.id.Destroy())
		e.id = nil
	}
}

// release is teardown for cleanups: best effort, errors ignored.
func (e *end) release() {
	if e.qp != nil {
		e.qp.Destroy()
	}
	if e.cq != nil {
		e.cq.Destroy()
	}
	if e.cc != nil {
		e.cc.Close()
	}
	if e.mr != nil {
		e.mr.Dereg()
	}
	if e.pd != nil {
		e.pd.Dealloc()
	}
	if e.mem != nil {
		e.mem.Free()
	}
	if e.id != nil {
		e.id.Destroy()
	}
}

// wait returns the next completion, sleeping on the completion channel.
func (e *end) wait(t testing.TB) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for {
		n, err := e.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			return wc[0]
		}
		require.NoError(t, e.cq.ReqNotify(false))
		n, err = e.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			return wc[0]
		}
		got, err := e.cc.GetEvent()
		require.NoError(t, err)
		require.Equal(t, e.cq, got)
		e.cc.AckEvents(got, 1)
	}
}

// connect makes a connected pair over the Soft-RoCE address.
func connect(t testing.TB, ip net.IP) (srv, cli *end, listen verbs.CMID, sch, cch verbs.EventChannel) {
	t.Helper()
	p, err := verbs.Lookup(ProviderName)
	require.NoError(t, err)
	sch, err = p.CreateEventChannel()
	require.NoError(t, err)
	cch, err = p.CreateEventChannel()
	require.NoError(t, err)
	srv, cli = &end{ch: sch}, &end{ch: cch}
	t.Cleanup(func() {
		srv.release()
		cli.release()
		if listen != nil {
			listen.Destroy()
		}
		sch.Close()
		cch.Close()
	})
	listen, err = sch.CreateID()
	require.NoError(t, err)
	require.NoError(t, listen.BindAddr(&net.TCPAddr{IP: ip}))
	require.NoError(t, listen.Listen(8))
	addr := listen.LocalAddr()
	require.NotNil(t, addr)
	require.NotZero(t, addr.Port)

	cid, err := cch.CreateID()
	require.NoError(t, err)
	require.NoError(t, cid.ResolveAddr(nil, addr, 2*time.Second))
	nextEvent(t, cch, verbs.EventAddrResolved)
	require.NoError(t, cid.ResolveRoute(2*time.Second))
	nextEvent(t, cch, verbs.EventRouteResolved)
	cli.setup(t, cid)
	require.NoError(t, cid.Connect(&verbs.ConnParam{PrivateData: []byte("hello"), ResponderResources: 1,
		InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))

	req := nextEvent(t, sch, verbs.EventConnectRequest)
	require.Equal(t, listen, req.Listen)
	require.NotNil(t, req.ID)
	// IB CM private data arrives padded to the REQ's size.
	require.GreaterOrEqual(t, len(req.Param.PrivateData), 5)
	assert.Equal(t, "hello", string(req.Param.PrivateData[:5]))
	srv.setup(t, req.ID)
	require.NoError(t, srv.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[:4096])}}}))
	require.NoError(t, req.ID.Accept(&verbs.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))
	est := nextEvent(t, cch, verbs.EventEstablished)
	require.GreaterOrEqual(t, len(est.Param.PrivateData), 7)
	assert.Equal(t, "welcome", string(est.Param.PrivateData[:7]))
	nextEvent(t, sch, verbs.EventEstablished)
	return srv, cli, listen, sch, cch
}

func TestConnectSendWriteRead(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	srv, cli, listen, _, _ := connect(t, ip)

	assert.Equal(t, cli.id.LocalAddr().String(), srv.id.RemoteAddr().String())
	assert.Equal(t, srv.id.LocalAddr().Port, listen.LocalAddr().Port)
	qa, err := cli.qp.Query()
	require.NoError(t, err)
	assert.Equal(t, verbs.QPSRTS, qa.State)
	assert.Equal(t, srv.qp.Num(), qa.DestQPNum)
	t.Logf("granted %+v", qa.Cap)

	// SEND / RECV with two SGEs on the sender.
	copy(cli.mem.Bytes(), "ping-")
	copy(cli.mem.Bytes()[100:], "pong")
	require.NoError(t, cli.qp.PostSend([]verbs.SendWR{{WRID: 10, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[:5]), verbs.SGEOf(cli.mr, cli.mem.Bytes()[100:104])}}}))
	wc := cli.wait(t)
	assert.Equal(t, verbs.WC{WRID: 10, Status: verbs.WCSuccess, Opcode: verbs.WCSend, QPNum: cli.qp.Num()},
		verbs.WC{WRID: wc.WRID, Status: wc.Status, Opcode: wc.Opcode, QPNum: wc.QPNum})
	wc = srv.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, verbs.WCRecv, wc.Opcode)
	assert.Equal(t, uint64(1), wc.WRID)
	assert.Equal(t, uint32(9), wc.ByteLen)
	assert.Equal(t, "ping-pong", string(srv.mem.Bytes()[:9]))

	// RDMA_WRITE_WITH_IMM consumes a receive and carries the immediate.
	require.NoError(t, srv.qp.PostRecv([]verbs.RecvWR{{WRID: 2}}))
	copy(cli.mem.Bytes()[200:], "written remotely")
	require.NoError(t, cli.qp.PostSend([]verbs.SendWR{{WRID: 11, Opcode: verbs.OpRDMAWriteWithImm,
		Flags: verbs.SendSignaled, Imm: 0xdeadbeef,
		SG:         []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[200:216])},
		RemoteAddr: srv.mr.Addr() + 8192, RKey: srv.mr.RKey()}}))
	wc = cli.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, verbs.WCRDMAWrite, wc.Opcode)
	wc = srv.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, verbs.WCRecvRDMAWithImm, wc.Opcode)
	assert.Equal(t, uint64(2), wc.WRID)
	assert.Equal(t, uint32(0xdeadbeef), wc.Imm)
	assert.NotZero(t, wc.Flags&verbs.WCWithImm)
	assert.Equal(t, uint32(16), wc.ByteLen)
	assert.Equal(t, "written remotely", string(srv.mem.Bytes()[8192:8208]))

	// RDMA_READ of the server's buffer into the client's.
	copy(srv.mem.Bytes()[16384:], "read me back")
	require.NoError(t, cli.qp.PostSend([]verbs.SendWR{{WRID: 12, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG:         []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[300:312])},
		RemoteAddr: srv.mr.Addr() + 16384, RKey: srv.mr.RKey()}}))
	wc = cli.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, verbs.WCRDMARead, wc.Opcode)
	assert.Equal(t, "read me back", string(cli.mem.Bytes()[300:312]))

	// Inline SEND from Go memory: the payload is copied at post time.
	require.NoError(t, srv.qp.PostRecv([]verbs.RecvWR{{WRID: 3, SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[:64])}}}))
	msg := []byte("inline!")
	require.NoError(t, cli.qp.PostSend([]verbs.SendWR{{WRID: 13, Opcode: verbs.OpSendWithImm, Imm: 7,
		Flags: verbs.SendSignaled | verbs.SendInline, SG: []verbs.SGE{{Addr: verbs.AddrOf(msg), Length: uint32(len(msg))}}}}))
	cli.wait(t)
	wc = srv.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	assert.Equal(t, uint32(7), wc.Imm)
	assert.Equal(t, "inline!", string(srv.mem.Bytes()[:7]))

	// Limits are refused with EINVAL and the index of the refused WR.
	err = cli.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, SG: make([]verbs.SGE, qa.Cap.MaxSendSGE+1)}})
	var pe *verbs.PostError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 0, pe.Index)
	assert.ErrorIs(t, err, syscall.EINVAL)
	big := make([]byte, qa.Cap.MaxInlineData+1)
	err = cli.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendInline,
		SG: []verbs.SGE{{Addr: verbs.AddrOf(big), Length: uint32(len(big))}}}})
	assert.ErrorIs(t, err, syscall.EINVAL)

	// Disconnect: both sides hear of it, outstanding receives flush.
	require.NoError(t, srv.qp.PostRecv([]verbs.RecvWR{{WRID: 99, SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[:64])}}}))
	disconnect(t, cli, srv)
	wc = srv.wait(t)
	assert.Equal(t, uint64(99), wc.WRID)
	assert.Equal(t, verbs.WCWRFlushErr, wc.Status)

	srv.teardown(t)
	cli.teardown(t)
}

// disconnect closes a connection from a's side. On the IB CM (RoCE too) the
// initiator's DISCONNECTED comes with the peer's DREP, which the peer sends
// when it calls rdma_disconnect on hearing of the DREQ (or, failing that,
// after the DREQ times out), so b answers as rping does.
func disconnect(t testing.TB, a, b *end) {
	t.Helper()
	require.NoError(t, a.id.Disconnect())
	nextEvent(t, b.ch, verbs.EventDisconnected)
	require.NoError(t, b.id.Disconnect())
	nextEvent(t, a.ch, verbs.EventDisconnected)
}

// Posting and polling allocate nothing.
func TestDataPathAllocs(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	srv, cli, _, _, _ := connect(t, ip)
	wc := make([]verbs.WC, 4)
	recv := []verbs.RecvWR{{WRID: 5, SG: []verbs.SGE{verbs.SGEOf(srv.mr, srv.mem.Bytes()[:64])}}}
	send := []verbs.SendWR{{WRID: 6, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[:64])}}}
	allocs := testing.AllocsPerRun(50, func() {
		if err := srv.qp.PostRecv(recv); err != nil {
			panic(err)
		}
		if err := cli.qp.PostSend(send); err != nil {
			panic(err)
		}
		for got := 0; got < 2; {
			n, err := cli.cq.Poll(wc)
			if err != nil {
				panic(err)
			}
			got += n
			n, err = srv.cq.Poll(wc)
			if err != nil {
				panic(err)
			}
			got += n
		}
	})
	assert.Zero(t, allocs)
	disconnect(t, cli, srv)
	srv.teardown(t)
	cli.teardown(t)
}

// A connect to a port nobody listens on is rejected, and rdma_reject's
// private data reaches the active side.
func TestRejects(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	ch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer ch.Close()

	dial := func(port int) (verbs.CMID, *end) {
		id, err := ch.CreateID()
		require.NoError(t, err)
		require.NoError(t, id.ResolveAddr(nil, &net.TCPAddr{IP: ip, Port: port}, 2*time.Second))
		nextEvent(t, ch, verbs.EventAddrResolved)
		require.NoError(t, id.ResolveRoute(2*time.Second))
		nextEvent(t, ch, verbs.EventRouteResolved)
		e := &end{}
		e.setup(t, id)
		require.NoError(t, id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
		return id, e
	}

	// Nobody listening.
	_, e := dial(9)
	ev := nextEvent(t, ch, verbs.EventRejected)
	t.Logf("no listener: %v status %d", ev.Type, ev.Status)
	assert.Equal(t, verbs.RejectStatusNoListener, ev.Status)
	e.teardown(t)

	// A listener that rejects.
	lch, err := p.CreateEventChannel()
	require.NoError(t, err)
	l, err := lch.CreateID()
	require.NoError(t, err)
	require.NoError(t, l.BindAddr(&net.TCPAddr{IP: ip}))
	require.NoError(t, l.Listen(4))
	_, e = dial(l.LocalAddr().Port)
	req := nextEvent(t, lch, verbs.EventConnectRequest)
	require.Error(t, req.ID.Reject(make([]byte, verbs.MaxPrivateDataReject+1)))
	require.NoError(t, req.ID.Reject([]byte("go away")))
	ev = nextEvent(t, ch, verbs.EventRejected)
	t.Logf("rejected: status %d private data %q", ev.Status, ev.Param.PrivateData)
	assert.Equal(t, verbs.RejectStatusConsumer, ev.Status)
	require.GreaterOrEqual(t, len(ev.Param.PrivateData), 7)
	assert.Equal(t, "go away", string(ev.Param.PrivateData[:7]))
	require.NoError(t, req.ID.Destroy())
	e.teardown(t)
	require.NoError(t, l.Destroy())
	require.NoError(t, lch.Close())
}

// GetEvent honours its deadline and Close unblocks it.
func TestEventChannelDeadlineAndClose(t *testing.T) {
	testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	ch, err := p.CreateEventChannel()
	require.NoError(t, err)
	_, err = ch.GetEvent(time.Now().Add(50 * time.Millisecond))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	done := make(chan error)
	go func() {
		_, err := ch.GetEvent(time.Time{})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, ch.Close())
	select {
	case err := <-done:
		require.True(t, errors.Is(err, verbs.ErrClosed), "got %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock GetEvent")
	}
	_, err = ch.GetEvent(time.Time{})
	require.ErrorIs(t, err, verbs.ErrClosed)
}

// Closing a completion channel unblocks a waiting GetEvent; it refuses while
// a CQ still uses it.
func TestCompChannelClose(t *testing.T) {
	dev, _ := testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	ctx, err := p.Open(dev)
	require.NoError(t, err)
	defer ctx.Close()
	cc, err := ctx.CreateCompChannel()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(4, cc)
	require.NoError(t, err)
	assert.Equal(t, cc, cq.Channel())
	require.ErrorIs(t, cc.Close(), syscall.EBUSY)
	require.NoError(t, cq.ReqNotify(false))
	require.NoError(t, cq.Destroy())
	done := make(chan error)
	go func() {
		_, err := cc.GetEvent()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, cc.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, verbs.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock GetEvent")
	}
}

// Overflowing a CQ is reported by Poll as ErrCQOverrun (the device says so
// with an asynchronous IBV_EVENT_CQ_ERR; the completions themselves are lost).
func TestCQOverrun(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	srv, cli, _, _, _ := connect(t, ip)
	// The client's CQ takes both its send and receive completions: more
	// signaled writes than it holds, never polled, overflow it.
	n := cli.cq.Cap() + 4
	wr := []verbs.SendWR{{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG:         []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[:8])},
		RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()}}
	qa, err := cli.qp.Query()
	require.NoError(t, err)
	posted := 0
	deadline := time.Now().Add(20 * time.Second)
	for posted < n && time.Now().Before(deadline) {
		// Keep the send queue from filling: at most MaxSendWR outstanding, and
		// completions stay unpolled so the CQ overflows.
		if err := cli.qp.PostSend(wr); err != nil {
			require.ErrorIs(t, err, syscall.ENOMEM, "posted %d of %d (send queue %d)", posted, n, qa.Cap.MaxSendWR)
			time.Sleep(time.Millisecond)
			continue
		}
		posted++
	}
	for time.Now().Before(deadline) {
		if _, err := cli.cq.Poll(nil); err != nil {
			require.ErrorIs(t, err, verbs.ErrCQOverrun)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no overrun after %d signaled sends on a CQ of %d", posted, cli.cq.Cap())
}
