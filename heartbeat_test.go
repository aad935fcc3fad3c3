package rdma

import (
	"errors"
	"github.com/rdmanet/rdma/internal/streamconn"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// heartbeatConfig is softConfig with a short PeerTimeout and no keepalive
// probe, so that only the heartbeat can find a silent peer.
func heartbeatConfig(peerTimeout time.Duration) *Config {
	return &Config{Provider: ProviderSoft, PeerTimeout: peerTimeout, KeepAlive: -1}
}

// acceptRaw connects a raw peer whose hello pd makes to ln, and returns it
// with the listener's conn.
func acceptRaw(t *testing.T, ln *Listener, pd func(h hello) []byte) (*rawPeer, *Conn) {
	t.Helper()
	acc := make(chan *Conn, 1)
	go func() {
		c, err := ln.AcceptRDMA()
		if err == nil {
			acc <- c
		}
	}()
	r, ev := dialRaw(t, ln, pd)
	require.Equal(t, verbs.EventEstablished, ev.Type)
	s := <-acc
	t.Cleanup(func() { s.Close() })
	return r, s
}

// recvImms polls the raw peer's CQ for d and returns the immediates of the
// messages it received (its sends' completions are dropped).
func (r *rawPeer) recvImms(t *testing.T, d time.Duration) []uint32 {
	t.Helper()
	var imms []uint32
	wcs := make([]verbs.WC, 16)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		n, err := r.cq.Poll(wcs)
		require.NoError(t, err)
		for _, wc := range wcs[:n] {
			if wc.Status == verbs.WCWRFlushErr {
				continue // the listener disconnected: receives flush
			}
			require.Equal(t, verbs.WCSuccess, wc.Status)
			if wc.Opcode == verbs.WCRecvRDMAWithImm {
				imms = append(imms, wc.Imm)
			}
		}
	}
	return imms
}

// A peer that announced heartbeats and answers nothing (its conn is as
// good as stopped) is pinged, then declared unresponsive: the pending Read
// fails, not before PeerTimeout, with an error that names the cause, is
// ETIMEDOUT and not a deadline's, and is no net.Error timeout.
func TestHeartbeatSilentPeer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ln := listen(t, heartbeatConfig(timeout))
	// The silence is timed from before the connection exists: the
	// connection's own clock starts during acceptRaw, which may take a
	// while on a loaded host.
	start := time.Now()
	r, s := acceptRaw(t, ln, func(h hello) []byte { return h.marshal() })
	assert.Equal(t, uint8(protoVersion), r.peer.version)
	assert.Equal(t, uint16(timeout/5/time.Millisecond), r.peer.heartbeat, "the listener asks for answers within a fifth of its PeerTimeout")

	s.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := s.Read(make([]byte, 16))
	took := time.Since(start)
	require.Error(t, err)
	t.Logf("Read: %v after %v", err, took)
	assert.GreaterOrEqual(t, took, timeout, "declared unresponsive before PeerTimeout")
	assert.ErrorContains(t, err, "peer unresponsive for 300ms")
	assert.ErrorIs(t, err, syscall.ETIMEDOUT)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.False(t, ne.Timeout(), "a dead connection is no timeout to retry")
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "read", oe.Op)
	_, err = s.Write([]byte("x"))
	assert.ErrorContains(t, err, "peer unresponsive")

	assert.Contains(t, r.recvImms(t, 50*time.Millisecond), immCtl(ctlPing), "the peer was pinged before it was given up")
	// And then disconnected: a paused peer that runs again finds its
	// connection reset by this verdict, rather than blaming the listener.
	r.wait(t, verbs.EventDisconnected)
}

// A peer of protocol version 1 announced no heartbeats: the listener
// answers with version 1, sends it no ping and never fails it for
// silence.
func TestHeartbeatVersion1PeerNotPinged(t *testing.T) {
	const timeout = 200 * time.Millisecond
	ln := listen(t, heartbeatConfig(timeout))
	r, s := acceptRaw(t, ln, func(h hello) []byte {
		h.version = 1
		return h.marshal()
	})
	assert.Equal(t, uint8(1), r.peer.version)
	assert.Zero(t, r.peer.heartbeat)

	assert.Empty(t, r.recvImms(t, 5*timeout), "a version 1 peer gets no message it does not know")
	r.write(t, 0, []byte("still here"), immData(10))
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 10)
	_, err := io.ReadFull(s, buf)
	require.NoError(t, err, "the silent version 1 peer's conn is not failed")
	assert.Equal(t, "still here", string(buf))
}

// A peer that agreed on version 1 and pings anyway breaks the protocol.
func TestHeartbeatPingOnVersion1(t *testing.T) {
	ln := listen(t, heartbeatConfig(-1))
	r, s := acceptRaw(t, ln, func(h hello) []byte {
		h.version = 1
		return h.marshal()
	})
	r.write(t, 0, nil, immCtl(ctlPing))
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := s.Read(make([]byte, 1))
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.EPROTO)
}

// A conn answers its peer's ping with a pong though its program neither
// reads nor writes and it pings nothing itself (PeerTimeout negative, no
// keepalive): it looks for pings as often as the peer asked.
func TestHeartbeatPingAnswered(t *testing.T) {
	ln := listen(t, heartbeatConfig(-1))
	r, _ := acceptRaw(t, ln, func(h hello) []byte {
		h.heartbeat = 50
		return h.marshal()
	})
	assert.Zero(t, r.peer.heartbeat, "a conn that pings nothing asks for no answers")
	for i := 0; i < 3; i++ {
		r.write(t, 0, nil, immCtl(ctlPing))
		var imms []uint32
		for end := time.Now().Add(10 * time.Second); len(imms) == 0 && time.Now().Before(end); {
			imms = r.recvImms(t, 20*time.Millisecond)
		}
		assert.Equal(t, []uint32{immCtl(ctlPong)}, imms, "ping %d", i)
	}
}

// Two idle conns that ping each other (or where only one pings) stay up
// well past PeerTimeout, with neither program reading nor writing; then
// they carry data both ways.
func TestHeartbeatIdlePairStaysUp(t *testing.T) {
	// A ping must be answered within half the timeout: 500 ms leaves room
	// for a scheduler that a loaded machine running -race delays (200 ms
	// failed there); the cases run in parallel to keep the test short.
	const timeout = time.Second
	for _, tc := range []struct {
		name           string
		dialer, server time.Duration
	}{
		{"both ping", timeout, timeout},
		{"dialer pings", timeout, -1},
		{"server pings", -1, timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln := listen(t, heartbeatConfig(tc.server))
			c := dial(t, ln, heartbeatConfig(tc.dialer))
			defer c.Close()
			s, err := ln.AcceptRDMA()
			require.NoError(t, err)
			defer s.Close()

			time.Sleep(4 * timeout)
			for _, p := range [][2]*Conn{{c, s}, {s, c}} {
				p[1].SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err := p[0].Write([]byte("ping"))
				require.NoError(t, err)
				buf := make([]byte, 4)
				_, err = io.ReadFull(p[1], buf)
				require.NoError(t, err)
			}
			for _, x := range []*Conn{c, s} {
				x.c.Core.Mu.Lock()
				received, failed := x.c.Received, x.c.Core.Err
				x.c.Core.Mu.Unlock()
				assert.NoError(t, failed)
				assert.Greater(t, received, uint64(2), "heartbeats went both ways")
			}
		})
	}
}

func TestPeerTimeoutDefaults(t *testing.T) {
	assert.Zero(t, (&Config{}).withDefaults().PeerTimeout, "default: no heartbeat of its own, as TCP")
	assert.Equal(t, 100*time.Millisecond, (&Config{PeerTimeout: time.Millisecond}).withDefaults().PeerTimeout)
	assert.Equal(t, -time.Second, (&Config{PeerTimeout: -time.Second}).withDefaults().PeerTimeout)
	assert.True(t, errors.Is(streamconn.UnresponsiveError(time.Second), syscall.ETIMEDOUT))
}

// An idle pair whose heartbeats run sends pings and pongs, not keepalive
// probes beside them: a message from the peer since the last probe says
// it is there. With the heartbeat off, the keepalive still probes.
func TestKeepaliveQuietWhileHeartbeatsFlow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		peerTimeout time.Duration
		probes      bool
	}{{"heartbeats", time.Second, false}, {"no heartbeats", -1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// The defaults' ratio: a probe due as often as a ping (2 s and 10 s).
			cfg := &Config{Provider: ProviderSoft, PeerTimeout: tc.peerTimeout, KeepAlive: 200 * time.Millisecond}
			ln := listen(t, cfg)
			c := dial(t, ln, cfg)
			defer c.Close()
			s, err := ln.AcceptRDMA()
			require.NoError(t, err)
			defer s.Close()
			time.Sleep(2 * time.Second)
			for _, x := range []*Conn{c, s} {
				st := x.Stats()
				assert.Empty(t, st.Err)
				if tc.probes {
					assert.Greater(t, st.KeepAlives, uint64(5), "an idle conn without heartbeats probes")
				} else {
					assert.LessOrEqual(t, st.KeepAlives, uint64(2), "pings flowing, probes skipped (%d pings sent, %d received)", st.PingsSent, st.PingsRecv)
					assert.Positive(t, st.PingsSent+st.PingsRecv, "the heartbeat ran")
				}
			}
		})
	}
}
