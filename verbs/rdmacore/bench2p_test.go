//go:build cgo && linux

package rdmacore

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// pingPongPeerEnv, set in a child process of
// BenchmarkPingPongBusyPollTwoProcesses, makes the same benchmark there
// be the peer that answers: "address count".
const pingPongPeerEnv = "RDMACORE_PINGPONG_PEER"

// BenchmarkPingPongBusyPollTwoProcesses is rstream's busy ping-pong in Go
// with nothing else, in two processes as rstream's is: raw verbs, 64-byte
// inline SENDs, each process busy-polling its CQ (yielding its P every 10
// us, as rdma.Conn's BusyPoll does, or never). In the Soft-RoCE guest it
// is the floor that Go's runtime sets under rdma.Conn's two-process
// BusyPoll round trip (softroce-bench's rdma-busy), which
// BenchmarkPingPongBusyPollTwoGoroutines, in one process, is not quite.
// It reports the median and the 99th percentile round trip beside the
// mean.
func BenchmarkPingPongBusyPollTwoProcesses(b *testing.B) {
	b.Run("yield10us", func(b *testing.B) { pingPongTwoProcesses(b, 10*time.Microsecond) })
	b.Run("noyield", func(b *testing.B) { pingPongTwoProcesses(b, 0) })
}

func pingPongTwoProcesses(b *testing.B, yieldEvery time.Duration) {
	_, ip := testsupport.SoftRoCE(b)
	if peer := os.Getenv(pingPongPeerEnv); peer != "" {
		answerPingPong(b, peer, yieldEvery)
		return
	}
	ch, listen := newChannelID(b)
	defer listen.Destroy()
	require.NoError(b, listen.BindAddr(&net.TCPAddr{IP: ip}))
	require.NoError(b, listen.Listen(1))

	// The peer: this test binary again, running this benchmark alone.
	peer := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^"+b.Name()+"$", "-test.benchtime=1x")
	peer.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", pingPongPeerEnv, listen.LocalAddr(), b.N))
	peer.Stdout, peer.Stderr = os.Stderr, os.Stderr
	require.NoError(b, peer.Start())
	finished := false
	defer func() {
		if !finished {
			_ = peer.Process.Kill() // it may be spinning for a message that will not come
		}
		err := peer.Wait()
		if finished {
			require.NoError(b, err, "the answering process")
		}
	}()

	req := nextEvent(b, ch, verbs.EventConnectRequest)
	e := &end{ch: ch}
	defer e.release()
	e.setup(b, req.ID)
	recv, send := pingWRs(e)
	require.NoError(b, e.qp.PostRecv(recv))
	require.NoError(b, req.ID.Accept(&verbs.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))
	nextEvent(b, ch, verbs.EventEstablished)

	rtts := make([]time.Duration, b.N)
	wc := make([]verbs.WC, 1)
	b.ResetTimer()
	for i := range rtts {
		start := time.Now()
		require.NoError(b, e.qp.PostSend(send))
		require.NoError(b, spinForRecv(e, wc, yieldEvery))
		require.NoError(b, e.qp.PostRecv(recv))
		rtts[i] = time.Since(start)
	}
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Nanoseconds()), "p99-ns")
	require.NoError(b, e.id.Disconnect())
	nextEvent(b, ch, verbs.EventDisconnected)
	finished = true
}

// answerPingPong is the answering process: it connects to addr, sends a
// message back for each of count it receives, and waits for the
// benchmark's disconnect.
func answerPingPong(b *testing.B, peer string, yieldEvery time.Duration) {
	var addr string
	var count int
	_, err := fmt.Sscan(peer, &addr, &count)
	require.NoError(b, err, "%s=%q", pingPongPeerEnv, peer)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(b, err)
	portNum, err := strconv.Atoi(port)
	require.NoError(b, err)
	ch, id := newChannelID(b)
	e := &end{ch: ch}
	defer e.release()
	require.NoError(b, id.ResolveAddr(nil, &net.TCPAddr{IP: net.ParseIP(host), Port: portNum}, 2*time.Second))
	nextEvent(b, ch, verbs.EventAddrResolved)
	require.NoError(b, id.ResolveRoute(2*time.Second))
	nextEvent(b, ch, verbs.EventRouteResolved)
	e.setup(b, id)
	recv, send := pingWRs(e)
	require.NoError(b, e.qp.PostRecv(recv))
	require.NoError(b, id.Connect(&verbs.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}))
	nextEvent(b, ch, verbs.EventEstablished)
	wc := make([]verbs.WC, 1)
	for range count {
		require.NoError(b, spinForRecv(e, wc, yieldEvery))
		require.NoError(b, e.qp.PostRecv(recv))
		require.NoError(b, e.qp.PostSend(send))
	}
	// The last answer is on its way: the benchmark disconnects once it
	// has it.
	nextEvent(b, ch, verbs.EventDisconnected)
	require.NoError(b, id.Disconnect())
}

// newChannelID is an event channel of the provider's, closed when b ends,
// and an ID on it.
func newChannelID(b *testing.B) (verbs.EventChannel, verbs.CMID) {
	p, err := verbs.Lookup(ProviderName)
	require.NoError(b, err)
	ch, err := p.CreateEventChannel()
	require.NoError(b, err)
	b.Cleanup(func() { ch.Close() })
	id, err := ch.CreateID()
	require.NoError(b, err)
	return ch, id
}

// pingWRs are the receive and the 64-byte inline SEND an end of the
// ping-pong posts each round trip.
func pingWRs(e *end) ([]verbs.RecvWR, []verbs.SendWR) {
	return []verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.mem.Bytes()[:4096])}}},
		[]verbs.SendWR{{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline,
			SG: []verbs.SGE{verbs.SGEOf(e.mr, e.mem.Bytes()[8192:8256])}}}
}
