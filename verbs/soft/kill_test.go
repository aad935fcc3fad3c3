package soft_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

func init() { testsupport.RegisterPeer("soft-kill", killChild) }

// killChild runs in a peer process: connect to the address in args and
// wait to be killed.
func killChild(args []string) int {
	addr := args[0]
	p, _ := verbs.Lookup("soft")
	ch, _ := p.CreateEventChannel()
	dst, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return 3
	}
	if code := soft.ChildConnect(ch, dst); code != 0 {
		return code
	}
	_, _ = ch.GetEvent(time.Now().Add(5 * time.Second))
	time.Sleep(time.Minute)
	return 5
}

// TestPeerProcessKilled: a peer process that dies (SIGKILL, no disconnect)
// is seen as DISCONNECTED, and the survivor's outstanding WRs flush.
func TestPeerProcessKilled(t *testing.T) {
	p, err := verbs.Lookup("soft")
	require.NoError(t, err)
	ch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer ch.Close()
	lid, err := ch.CreateID()
	require.NoError(t, err)
	defer lid.Destroy()
	require.NoError(t, lid.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}))
	require.NoError(t, lid.Listen(4))

	cmd := testsupport.StartPeer(t, "soft-kill", nil, lid.LocalAddr().String())

	req, err := ch.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventConnectRequest, req.Type)
	ctx := req.ID.Context()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	qp, err := req.ID.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	mem, err := verbs.AllocMemory(4096)
	require.NoError(t, err)
	defer mem.Free()
	mr, err := pd.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, req.ID.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	ev, err := ch.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventEstablished, ev.Type)
	require.NoError(t, qp.PostRecv([]verbs.RecvWR{{WRID: 42, SG: []verbs.SGE{verbs.SGEOf(mr, mem.Bytes()[:64])}}}))

	require.NoError(t, cmd.Process.Kill())
	ev, err = ch.GetEvent(time.Now().Add(10 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventDisconnected, ev.Type)
	wc := make([]verbs.WC, 2)
	n, err := cq.Poll(wc)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, verbs.WCWRFlushErr, wc[0].Status)
	require.Equal(t, uint64(42), wc[0].WRID)
	a, err := qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSErr, a.State)

	require.NoError(t, qp.Destroy())
	require.NoError(t, req.ID.Destroy())
	require.NoError(t, mr.Dereg())
	require.NoError(t, cq.Destroy())
	require.NoError(t, pd.Dealloc())
}
