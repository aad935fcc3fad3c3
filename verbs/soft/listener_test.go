package soft_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// softListener listens on 127.0.0.1 with the given handshake limits.
func softListener(t *testing.T, timeout time.Duration, slots int) (verbs.EventChannel, verbs.CMID) {
	oldT := soft.SetHandshakeTimeout(timeout)
	oldN := soft.SetMaxHandshakes(slots)
	defer soft.SetHandshakeTimeout(oldT)
	defer soft.SetMaxHandshakes(oldN)
	p, err := verbs.Lookup("soft")
	require.NoError(t, err)
	ch, err := p.CreateEventChannel()
	require.NoError(t, err)
	t.Cleanup(func() { ch.Close() })
	id, err := ch.CreateID()
	require.NoError(t, err)
	require.NoError(t, id.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}))
	require.NoError(t, id.Listen(8))
	t.Cleanup(func() { id.Destroy() })
	return ch, id
}

// closedByPeer waits until the server closes c.
func closedByPeer(t *testing.T, c net.Conn, within time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the listener should have closed the connection")
}

func TestSilentConnectionTimesOut(t *testing.T) {
	_, id := softListener(t, 100*time.Millisecond, 4)
	c, err := net.Dial("tcp", id.LocalAddr().String())
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	closedByPeer(t, c, 5*time.Second)
	require.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
}

func TestHandshakeSlotsBounded(t *testing.T) {
	ch, id := softListener(t, 10*time.Second, 2)
	addr := id.LocalAddr().String()
	var silent []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		silent = append(silent, c)
	}
	time.Sleep(50 * time.Millisecond) // let the listener take both
	// Both slots are held (for up to 10 s): a third connection is closed on
	// arrival, long before that.
	extra, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer extra.Close()
	closedByPeer(t, extra, 3*time.Second)
	// Once the silent ones go away, a real client gets through.
	for _, c := range silent {
		c.Close()
	}
	time.Sleep(300 * time.Millisecond) // the listener sees them end
	p, _ := verbs.Lookup("soft")
	cch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer cch.Close()
	cid, err := cch.CreateID()
	require.NoError(t, err)
	require.NoError(t, cid.ResolveAddr(nil, id.LocalAddr(), time.Second))
	ev, err := cch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventAddrResolved, ev.Type)
	require.NoError(t, cid.ResolveRoute(time.Second))
	_, err = cch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	ctx := cid.Context()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(8, nil)
	require.NoError(t, err)
	qp, err := cid.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, cid.Connect(nil))
	req, err := ch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventConnectRequest, req.Type)
	require.NoError(t, req.ID.Reject(nil))
	ev, err = cch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventRejected, ev.Type)
	require.NoError(t, req.ID.Destroy())
	require.NoError(t, qp.Destroy())
	require.NoError(t, cid.Destroy())
	require.NoError(t, cq.Destroy())
	require.NoError(t, pd.Dealloc())
}
