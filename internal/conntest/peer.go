package conntest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/rootstack"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// peerName is the peer process of the suite, run by testsupport.Main.
const peerName = "conntest"

func init() {
	testsupport.RegisterPeer(peerName, runPeer)
	register(testPeerKilled, testPeerStopped, testPeerPaused, testPeerPausedUnderTimeout)
}

// runPeer is the peer process: args are mode, provider, wire, address,
// PeerTimeout and KeepAlive. It dials, then in mode "stream" writes until
// the conn fails; in mode "echo" it echoes on pauseConns conns (echoPeer,
// pause.go).
func runPeer(args []string) int {
	if len(args) != 6 {
		fmt.Fprintf(os.Stderr, "conntest peer: want mode, provider, wire, address, PeerTimeout, KeepAlive; got %q\n", args)
		return 2
	}
	mode, provider, wire, addr := args[0], args[1], args[2], args[3]
	peerTimeout, err1 := time.ParseDuration(args[4])
	keepAlive, err2 := time.ParseDuration(args[5])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "conntest peer: bad duration:", args[4:])
		return 2
	}
	stack := rootstack.Root()
	if stack == nil {
		fmt.Fprintln(os.Stderr, "conntest peer: the root package is not in the binary")
		return 2
	}
	cfg := stack.Tune(nil, rootstack.Tuning{Provider: provider, Wire: wire, PeerTimeout: peerTimeout, KeepAlive: keepAlive})
	if mode == "echo" {
		return echoPeer(stack, cfg, addr)
	}
	c, err := stack.Dial(context.Background(), cfg, addr, time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conntest peer:", err)
		return 3
	}
	buf := make([]byte, 32<<10)
	switch mode {
	case "stream":
		for {
			if _, err := c.Write(buf); err != nil {
				return 4
			}
		}
	}
	return 5
}

// startPeer starts a peer process in mode that dials ln, and accepts its
// conn.
func (s *suite) startPeer(t *testing.T, mode string, ln net.Listener) (*os.Process, Conn) {
	cmd := testsupport.StartPeer(t, peerName, s.cfg.PeerEnv, mode, s.tuned.Provider, s.tuned.Wire, ln.Addr().String(), "0s", "0s")
	a, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	c := s.wrap(a.(Conn))
	t.Cleanup(func() { c.Close() })
	assert.Equal(t, s.tuned.Provider, c.Provider())
	s.checkTransport(t, c)
	return cmd.Process, c
}

// A peer process killed mid-stream (SIGKILL: nothing of it runs any more):
// the survivor's Read fails, not with io.EOF, within DetectWithin; its
// Write fails too rather than time out; the listener goes on serving.
func testPeerKilled(t *testing.T, s *suite) {
	ln := s.listen(t, nil)
	peer, c := s.startPeer(t, "stream", ln)
	_, err := io.ReadFull(c, make([]byte, s.scale(4<<20, 8)))
	require.NoError(t, err)

	require.NoError(t, peer.Kill())
	err = s.survivorReadFails(t, c, "")
	assert.NotEqual(t, io.EOF, err)

	c.SetWriteDeadline(time.Now().Add(s.cfg.DetectWithin))
	var werr error
	for i := 0; i < 1000 && werr == nil; i++ {
		_, werr = c.Write(make([]byte, 4096))
	}
	require.Error(t, werr)
	assert.NotErrorIs(t, werr, os.ErrDeadlineExceeded, "Write must fail, not time out")
	checkOpError(t, werr, "write")

	testsupport.Serves(t, ln, s.dialer(nil))
}

// A stopped peer found by the heartbeat alone: the survivor has a short
// PeerTimeout and no keepalive probe, so neither its transport (which a
// stopped process's kernel keeps acknowledging, and on soft its engine
// takes for a live NIC) nor a probe can be what notices. The error names
// the cause and the bound. The peer, once it runs again, finds its conns
// reset by the survivor's verdict, and does not blame the survivor for
// its own pause (pause.go).
func testPeerStopped(t *testing.T, s *suite) {
	err := s.pausedPastTimeout(t)
	assert.ErrorContains(t, err, "peer unresponsive for 1s")
	assert.ErrorIs(t, err, syscall.ETIMEDOUT)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)
}

// survivorReadFails reads c, whose peer is gone or stopped, until an error;
// checks that the error is a read *net.OpError that came within
// DetectWithin; logs it (how names the test's setting) and returns it.
func (s *suite) survivorReadFails(t *testing.T, c Conn, how string) error {
	took, err := readUntilError(c)
	checkOpError(t, err, "read")
	assert.Less(t, took, s.cfg.DetectWithin)
	t.Logf("survivor's Read%s: %v after %v", how, err, took)
	return err
}

// readUntilError reads c until an error and returns it with the time taken.
func readUntilError(c Conn) (time.Duration, error) {
	start := time.Now()
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return time.Since(start), err
		}
	}
}
