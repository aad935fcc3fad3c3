package conntest

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// peerName is the peer process of the suite, run by testsupport.Main.
const peerName = "conntest"

func init() {
	testsupport.RegisterPeer(peerName, runPeer)
	register("PeerKilled", testPeerKilled)
	register("PeerSilent", testPeerSilent)
	register("PeerStopped", testPeerStopped)
}

// runPeer is the peer process: args are mode, provider, wire and address. It
// dials, then by mode streams until it fails ("stream") or writes 1 KiB and
// idles ("idle").
func runPeer(args []string) int {
	if len(args) != 4 {
		fmt.Fprintf(os.Stderr, "conntest peer: want mode, provider, wire, address; got %q\n", args)
		return 2
	}
	mode, provider, wire, addr := args[0], args[1], args[2], args[3]
	d := rdma.Dialer{Config: &rdma.Config{Provider: provider, Wire: wire}, Timeout: time.Minute}
	c, err := d.Dial(rdma.Network, addr)
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
	case "idle":
		if _, err := c.Write(buf[:1024]); err != nil {
			return 4
		}
		time.Sleep(time.Hour)
	}
	return 5
}

// startPeer starts a peer process in mode that dials ln, and accepts its
// conn.
func (s *suite) startPeer(t *testing.T, mode string, ln *rdma.Listener) (*os.Process, Conn) {
	cmd := testsupport.StartPeer(t, peerName, s.cfg.PeerEnv, mode, s.cfg.RDMA.Provider, s.cfg.RDMA.Wire, ln.Addr().String())
	a, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	c := s.wrap(a.(Conn))
	t.Cleanup(func() { c.Close() })
	assert.Equal(t, s.cfg.RDMA.Provider, c.Provider())
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

// A peer that stops answering without closing anything (SIGSTOP: its
// sockets and QPs stay up): the survivor's Read fails within DetectWithin,
// with an error that is neither io.EOF nor a deadline. The configuration
// under test finds it by what it has: on soft the transport (the stopped
// process acknowledges nothing), on rdmacore the heartbeat (default
// PeerTimeout: its kernel acknowledges for it).
func testPeerSilent(t *testing.T, s *suite) {
	ln := s.listen(t, nil)
	c := s.stoppedPeer(t, ln)
	err := s.survivorReadFails(t, c, "")
	assert.NotEqual(t, io.EOF, err)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)

	testsupport.Serves(t, ln, s.dialer(nil))
}

// A stopped peer found by the heartbeat alone: the survivor has a short
// PeerTimeout and no keepalive probe, so neither its transport (which a
// stopped process's kernel keeps acknowledging on rdmacore) nor a probe
// can be what notices. The error names the cause and the bound.
func testPeerStopped(t *testing.T, s *suite) {
	cfg := s.config()
	cfg.PeerTimeout = time.Second
	cfg.KeepAlive = -1
	ln := s.listen(t, cfg)
	c := s.stoppedPeer(t, ln)
	err := s.survivorReadFails(t, c, " (PeerTimeout 1s, no keepalive)")
	assert.ErrorContains(t, err, "peer unresponsive for 1s")
	assert.ErrorIs(t, err, syscall.ETIMEDOUT)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)

	testsupport.Serves(t, ln, s.dialer(nil))
}

// stoppedPeer starts an idle peer process that dials ln, reads what it
// sends first, and stops the process (SIGSTOP): its sockets and QPs stay
// up, and nothing of it runs.
func (s *suite) stoppedPeer(t *testing.T, ln *rdma.Listener) Conn {
	peer, c := s.startPeer(t, "idle", ln)
	_, err := io.ReadFull(c, make([]byte, 1024))
	require.NoError(t, err)
	require.NoError(t, peer.Signal(syscall.SIGSTOP))
	return c
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
