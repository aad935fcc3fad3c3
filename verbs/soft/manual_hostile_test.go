//go:build linux

package soft_test

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// One host's silent connections to a device's listener do not keep
// another host's QP from connecting: a child (as nobody, when the test
// runs as root) holds 400 silent connections from 127.0.6.2 to the
// waiting QP's device, with a handshake timeout of 30 s, and the QPs of
// 127.0.0.1 still connect and a WRITE goes through at once. Before the
// device's listener took the CM listener's admission, it read at most
// SetMaxHandshakes (64) hellos at once and closed every connection beyond
// them, so the dialing QP was refused until the silent ones timed out: its
// WRITE completed with a retry error, or not at all, in 5 s.
func TestManualListenerSilentFlood(t *testing.T) {
	prev := soft.SetHandshakeTimeout(30 * time.Second)
	defer soft.SetHandshakeTimeout(prev)
	uid := 0
	if os.Geteuid() == 0 {
		uid = nobody
	}
	w, d := waiterAndDialer(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(w.lid)))
	const count = 400
	_, in, out := startChild(t, "flood", fmt.Sprintf("%s 127.0.6.2 %d %d silent", addr, count, count), uid)
	defer in.Close()
	l, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "flooding\n", l)
	time.Sleep(100 * time.Millisecond) // the listener has taken them all in

	start := time.Now()
	w.toRTR(t, d)
	w.toRTS(t)
	d.toRTR(t, w)
	d.toRTS(t)
	buf := d.mem.Bytes()[:64]
	copy(buf, "past a flood of silent connections")
	d.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(d.mr, buf)}, RemoteAddr: w.mr.Addr(), RKey: w.mr.RKey()}, verbs.WCSuccess)
	require.Equal(t, buf, w.mem.Bytes()[:64])
	t.Logf("connected and written in %v beside %d silent connections", time.Since(start), count)
	require.Less(t, time.Since(start), 3*time.Second)
}
