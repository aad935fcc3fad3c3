package soft_test

import (
	"errors"
	"io"
	"net"
	"syscall"
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

// Connections that have not sent a whole request hold none of the
// listener's handshake slots: with two slots, a client gets its request
// reported past twenty silent connections and five that sent half a
// request, and those are closed at the handshake timeout. All from one
// host, they fill the 8 waiting places one host has with two slots: the
// client, parked behind the rest, gets the first place that frees up (its
// request is there, theirs not), when the first of them time out.
func TestSilentConnectionsHoldNoSlot(t *testing.T) {
	ch, id := softListener(t, 2*time.Second, 2)
	addr := id.LocalAddr().String()
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	req := soft.RawREQ(1, nil)
	for i := range 25 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		idle = append(idle, c)
		if i%5 == 0 {
			_, err = c.Write(req[:len(req)/2])
			require.NoError(t, err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the listener has taken them all by now
	p, _ := verbs.Lookup("soft")
	cch, err := p.CreateEventChannel()
	require.NoError(t, err)
	defer cch.Close()
	cid, err := cch.CreateID()
	require.NoError(t, err)
	require.NoError(t, cid.ResolveAddr(nil, id.LocalAddr(), 5*time.Second))
	ev, err := cch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventAddrResolved, ev.Type)
	require.NoError(t, cid.ResolveRoute(5*time.Second))
	_, err = cch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	ctx := cid.Context()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(8, nil)
	require.NoError(t, err)
	qp, err := cid.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, cid.Connect(nil))
	creq, err := ch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventConnectRequest, creq.Type)
	require.Less(t, time.Since(start), 3*time.Second, "the client waited behind the parked silent ones")
	require.NoError(t, creq.ID.Reject(nil))
	ev, err = cch.GetEvent(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, verbs.EventRejected, ev.Type)
	require.NoError(t, creq.ID.Destroy())
	require.NoError(t, qp.Destroy())
	require.NoError(t, cid.Destroy())
	require.NoError(t, cq.Destroy())
	require.NoError(t, pd.Dealloc())
	for _, c := range idle {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Read(make([]byte, 1))
		// Closed with half a request unread, the kernel resets.
		if !errors.Is(err, syscall.ECONNRESET) {
			require.ErrorIs(t, err, io.EOF, "the listener should have closed the connection")
		}
	}
}
