package conntest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/rootstack"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// A process that is paused (SIGSTOP here; a debugger, a frozen container,
// a VM or swap stall alike) keeps its connections, as over TCP and on a
// NIC: its transport stays up (its kernel acknowledges, or its NIC, and on
// soft its kernel or live process stands for the NIC), so only the
// heartbeat ends them, once Config.PeerTimeout has passed, and a side
// that was itself paused does not blame its peer for its own pause.

// retryWindow is the transport's retry window of rdma.Conn's QPs: 8 tries
// (retry count 7) of 4.096 us * 2^16 each (endpoint.go's ackTimeoutExp).
const retryWindow = 8 * 4096 * (1 << 16) * time.Nanosecond

// pauseKeepAlive is the keepalive of both ends in the pause subtests:
// short, so that an idle conn has a probe outstanding through the pause.
const pauseKeepAlive = 200 * time.Millisecond

// pauseConns is how many conns the paused peer holds.
const pauseConns = 3

// pauseWrite is what this side writes toward the stopped peer: within the
// peer's ring (1 MiB by default), more than a stopped receiver's TCP
// window.
const pauseWrite = 512 << 10

// echoPeer is the paused peer (runPeer's mode "echo"): it dials pauseConns
// conns with cfg and echoes whatever each brings; as each ends it prints
// "conn <i>: <error>" to its standard output, and it returns once all have.
func echoPeer(stack rootstack.Stack, cfg any, addr string) int {
	var wg sync.WaitGroup
	var out sync.Mutex
	for i := 0; i < pauseConns; i++ {
		c, err := stack.Dial(context.Background(), cfg, addr, time.Minute)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conntest pause peer:", err)
			return 3
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := io.Copy(c, c)
			if err == nil {
				err = io.EOF
			}
			c.Close()
			out.Lock()
			fmt.Printf("conn %d: %v\n", i, err)
			out.Unlock()
		}()
	}
	wg.Wait()
	return 0
}

// pausedPeer is a peer process in mode "echo" and this side's conns to
// it.
type pausedPeer struct {
	proc  *os.Process
	conns []Conn
	lines chan string // what the peer prints: its conns' ends
}

// startPausePeer starts the paused peer with its PeerTimeout and
// KeepAlive, accepts its conns on ln, and checks that each echoes.
func (s *suite) startPausePeer(t *testing.T, ln net.Listener, peerTimeout, keepAlive time.Duration) *pausedPeer {
	cmd := testsupport.PeerCommand(peerName, "echo", s.tuned.Provider, s.tuned.Wire, ln.Addr().String(),
		peerTimeout.String(), keepAlive.String())
	cmd.Env = append(cmd.Env, s.cfg.PeerEnv...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &pausedPeer{proc: cmd.Process, lines: make(chan string, pauseConns)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for i := 0; i < pauseConns; i++ {
		a, err := ln.Accept()
		require.NoError(t, err)
		c := s.wrap(a.(Conn))
		t.Cleanup(func() { c.Close() })
		s.checkTransport(t, c)
		p.conns = append(p.conns, c)
	}
	for i, c := range p.conns {
		echoes(t, c, fmt.Sprintf("before the pause, conn %d", i))
	}
	return p
}

// pause stops the peer process for d, while this side writes on the first
// conn (so that its sends wait unanswered, and on soft's TCP path the
// stopped peer's receive window closes) and lets the others idle (so that
// their keepalive probes wait), then lets it run again.
func (p *pausedPeer) pause(t *testing.T, d time.Duration) (sent []byte, wrote chan error) {
	testsupport.Stop(t, p.proc)
	start := time.Now()
	sent = bytes.Repeat([]byte("paused!!"), pauseWrite/8)
	wrote = make(chan error, 1)
	go func() {
		_, err := p.conns[0].Write(sent) // may wait for the peer: backpressure
		wrote <- err
	}()
	time.Sleep(d - time.Since(start))
	require.NoError(t, p.proc.Signal(syscall.SIGCONT))
	t.Logf("peer process stopped for %v", time.Since(start))
	return sent, wrote
}

// echoes checks that c carries a message to the peer and its echo back,
// within 30 s.
func echoes(t *testing.T, c Conn, what string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	defer c.SetDeadline(time.Time{})
	msg := []byte("echo: " + what)
	_, err := c.Write(msg)
	require.NoError(t, err, what)
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err, what)
	require.Equal(t, string(msg), string(got), what)
}

// survives checks that every conn of p outlived the pause: what was
// written during it comes back, then each echoes again.
func (p *pausedPeer) survives(t *testing.T, sent []byte, wrote chan error) {
	c := p.conns[0]
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	got := make([]byte, len(sent))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err, "the echo of what was written during the pause")
	require.True(t, bytes.Equal(sent, got), "the echo of what was written during the pause differs")
	require.NoError(t, <-wrote, "the Write begun during the pause")
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	for i, c := range p.conns {
		echoes(t, c, fmt.Sprintf("after the pause, conn %d", i))
	}
	select {
	case l := <-p.lines:
		t.Fatalf("a conn of the paused peer ended: %s", l)
	default:
	}
}

// A peer process stopped for twice the transport's retry window, this side
// with the defaults' PeerTimeout (none, as TCP): every conn survives and
// carries data afterwards, the bytes written toward it during the pause
// included. The peer holds this side to a PeerTimeout of 1 s, which its
// own pause outlasts, while this side, which pings nothing, sends nothing
// on two of the conns: the peer's timers fire late, and it must not charge
// its own pause to this side, which answered all along.
func testPeerPaused(t *testing.T, s *suite) {
	cfg := s.config()
	cfg.KeepAlive = pauseKeepAlive
	ln := s.listen(t, cfg)
	p := s.startPausePeer(t, ln, time.Second, pauseKeepAlive)
	sent, wrote := p.pause(t, 2*retryWindow)
	p.survives(t, sent, wrote)
}

// A peer process stopped for just under PeerTimeout (4/5 of it, longer
// than the transport's retry window), both sides holding each other to
// it: every conn survives, neither side declares the other unresponsive,
// and the conns carry data afterwards.
func testPeerPausedUnderTimeout(t *testing.T, s *suite) {
	const peerTimeout = 4 * time.Second
	cfg := s.config()
	cfg.KeepAlive, cfg.PeerTimeout = pauseKeepAlive, peerTimeout
	ln := s.listen(t, cfg)
	p := s.startPausePeer(t, ln, peerTimeout, pauseKeepAlive)
	sent, wrote := p.pause(t, peerTimeout*4/5)
	p.survives(t, sent, wrote)
}

// pausedPastTimeout stops the paused peer past PeerTimeout (1 s on both
// sides, this one without keepalive): this side's Read fails with the
// heartbeat's error; then the peer runs again, and each of its conns
// reports this side's verdict, a reset, and not "peer unresponsive".
func (s *suite) pausedPastTimeout(t *testing.T) error {
	const peerTimeout = time.Second
	cfg := s.config()
	cfg.PeerTimeout, cfg.KeepAlive = peerTimeout, -1
	ln := s.listen(t, cfg)
	p := s.startPausePeer(t, ln, peerTimeout, pauseKeepAlive)
	testsupport.Stop(t, p.proc)
	err := s.survivorReadFails(t, p.conns[0], " (PeerTimeout 1s, no keepalive)")
	for _, c := range p.conns[1:] {
		_, err := readUntilError(c)
		assert.ErrorContains(t, err, "peer unresponsive for 1s")
	}
	time.Sleep(peerTimeout) // the peer's own PeerTimeout passes, stopped
	require.NoError(t, p.proc.Signal(syscall.SIGCONT))
	deadline := time.After(30 * time.Second)
	for i := 0; i < pauseConns; i++ {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "the paused peer exited before reporting each conn's end")
			t.Logf("the resumed peer's %s", l)
			assert.NotContains(t, l, "unresponsive", "the resumed peer blamed this side, which answered all along")
			assert.True(t, strings.Contains(l, syscall.ECONNRESET.Error()) || strings.Contains(l, "reset by peer"),
				"the resumed peer should report this side's verdict (a reset): %s", l)
		case <-deadline:
			t.Fatalf("the resumed peer reported %d of its %d conns' ends within 30 s", i, pauseConns)
		}
	}
	testsupport.Serves(t, ln, s.dialer(nil))
	return err
}

// PausedFor is PeerPaused for a pause of d, outside the suite (a pause of
// a minute is too long to run on every path and provider): a peer process
// with 3 conns is stopped for d while this side writes toward it, both
// sides with cfg.RDMA's PeerTimeout (0: none, as TCP), and every conn must
// carry data afterwards, what was written during the pause included.
func PausedFor(t *testing.T, cfg Config, d time.Duration) {
	stack := rootStack(t, cfg)
	s := &suite{cfg: cfg, stack: stack, tuned: stack.Tuning(cfg.RDMA)}
	c := s.config()
	c.KeepAlive = pauseKeepAlive
	ln := s.listen(t, c)
	p := s.startPausePeer(t, ln, c.PeerTimeout, pauseKeepAlive)
	sent, wrote := p.pause(t, d)
	p.survives(t, sent, wrote)
}
