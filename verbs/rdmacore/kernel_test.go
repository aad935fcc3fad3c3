//go:build cgo && linux

package rdmacore

import (
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

// The kernel's address-resolution and listen behaviour (0.0.0.0 resolves to
// the local device; rdma_listen on an unbound ID binds the wildcard), which
// the suite's ResolveErrors and the soft provider now follow, pinned down
// here directly so that a change in the kernel shows.
func TestKernelResolveAndListen(t *testing.T) {
	testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	ch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer ch.Close()
	ids := []verbs.CMID{}
	newID := func() verbs.CMID {
		id, err := ch.CreateID()
		require.NoError(t, err)
		ids = append(ids, id)
		return id
	}
	defer func() {
		for _, id := range ids {
			assert.NoError(t, id.Destroy())
		}
	}()

	id := newID()
	// Before address resolution librdmacm would crash; rdmacore refuses.
	require.ErrorIs(t, id.ResolveRoute(time.Second), syscall.EINVAL)
	require.ErrorIs(t, id.Connect(&verbs.ConnParam{}), syscall.EINVAL)
	require.ErrorIs(t, id.Disconnect(), syscall.EINVAL)
	// 0.0.0.0 resolves to the local device.
	require.NoError(t, id.ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4zero, Port: 1}, time.Second))
	nextEvent(t, ch, verbs.EventAddrResolved)
	// A multicast destination fails at once.
	require.ErrorIs(t, newID().ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4(224, 0, 0, 1), Port: 1}, time.Second),
		syscall.ENETUNREACH)
	// Binding an address that is not ours fails (TEST-NET-1: nothing is sent).
	id3 := newID()
	require.ErrorIs(t, id3.BindAddr(&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}), syscall.EADDRNOTAVAIL)
	// Listening on an unbound ID binds it to the wildcard address.
	require.NoError(t, id3.Listen(1))
	la := id3.LocalAddr()
	require.NotNil(t, la)
	assert.True(t, la.IP.IsUnspecified(), "bound to %v", la)
	assert.NotZero(t, la.Port)
}

// A connect request the listener never answers is not timed out by the
// kernel within seconds; destroying the request rejects it (consumer reject).
func TestKernelUnansweredConnect(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	p, _ := verbs.Lookup(ProviderName)
	sch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer sch.Close()
	cch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer cch.Close()
	l, err := sch.CreateID()
	require.NoError(t, err)
	defer l.Destroy()
	require.NoError(t, l.BindAddr(&net.TCPAddr{IP: ip}))
	require.NoError(t, l.Listen(1))
	c := &end{ch: cch}
	defer c.release()
	cid, err := cch.CreateID()
	require.NoError(t, err)
	require.NoError(t, cid.ResolveAddr(nil, l.LocalAddr(), 300*time.Millisecond))
	nextEvent(t, cch, verbs.EventAddrResolved)
	require.NoError(t, cid.ResolveRoute(300*time.Millisecond))
	nextEvent(t, cch, verbs.EventRouteResolved)
	c.setup(t, cid)
	require.NoError(t, cid.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	req := nextEvent(t, sch, verbs.EventConnectRequest)
	_, err = cch.GetEvent(time.Now().Add(3 * time.Second))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no event while the request is unanswered")
	require.NoError(t, req.ID.Destroy())
	ev := nextEvent(t, cch, verbs.EventRejected)
	assert.Equal(t, verbs.RejectStatusConsumer, ev.Status)
	c.teardown(t)
}

// Timeout and RetryCnt belong to the RTR->RTS transition.
func TestKernelModifyRTS(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	_, cli, _, _, _ := connect(t, ip)
	err := cli.qp.Modify(&verbs.QPAttr{Timeout: 12, RetryCnt: 2}, verbs.QPAttrTimeout|verbs.QPAttrRetryCnt)
	require.ErrorIs(t, err, syscall.EINVAL)
	// MIN_RNR_TIMER is one an RTS QP may change.
	require.NoError(t, cli.qp.Modify(&verbs.QPAttr{MinRNRTimer: 1}, verbs.QPAttrMinRNRTimer))
}

// A receive posted to a QP already in ERR stays queued on rxe without a
// flush completion (recvInErrUnflushed), while the receives queued before
// the transition are flushed. Should a kernel flush it, this fails: then
// drop Config.RecvInErrUnflushed from TestConformance so that the suite
// checks it here too.
func TestKernelRecvInErrUnflushed(t *testing.T) {
	_, ip := testsupport.SoftRoCE(t)
	_, cli, _, _, _ := connect(t, ip)
	post := func(id uint64) {
		t.Helper()
		require.NoError(t, cli.qp.PostRecv([]verbs.RecvWR{{WRID: id, SG: []verbs.SGE{verbs.SGEOf(cli.mr, cli.mem.Bytes()[:64])}}}))
	}
	post(1)
	require.NoError(t, cli.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	wc := cli.wait(t)
	require.Equal(t, uint64(1), wc.WRID)
	require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	post(2)
	buf := make([]verbs.WC, 1)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		n, err := cli.cq.Poll(buf)
		require.NoError(t, err)
		require.Zero(t, n, "the kernel now flushes a receive posted in ERR (%+v): "+
			"drop Config.RecvInErrUnflushed from TestConformance", buf[0])
	}
}
