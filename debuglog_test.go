package rdma

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs/soft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer that slog may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureDebug turns RDMA_DEBUG on at level for subsys and returns what
// it logs; the test's end turns it off again.
func captureDebug(t *testing.T, level, subsys string) *syncBuffer {
	var out syncBuffer
	SetDebugLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: LevelTrace})))
	setDebug(level, subsys)
	t.Cleanup(func() {
		setDebug("", "")
		SetDebugLogger(nil)
	})
	return &out
}

func TestDebugLevels(t *testing.T) {
	for _, c := range []struct {
		level, subsys string
		sub           int
		at            slog.Level
		on            bool
	}{
		{"", "", subDial, slog.LevelWarn, false},
		{"WARN", "", subDial, slog.LevelWarn, true},
		{"WARN", "", subDial, slog.LevelInfo, false},
		{"INFO", "dial,shm", subShm, slog.LevelInfo, true},
		{"INFO", "dial,shm", subRing, slog.LevelWarn, false},
		{"INFO", "^ring", subRing, slog.LevelWarn, false},
		{"INFO", "^ring", subConn, slog.LevelWarn, true},
		{"trace", "ALL", subRing, LevelTrace, true},
	} {
		setDebug(c.level, c.subsys)
		assert.Equal(t, c.on, debugOn(c.sub, c.at), "%+v", c)
	}
	setDebug("", "")
}

// A forced fallback (auto, a provider of its own in rdmacore's place,
// nothing listening on its side) is logged with its reason, and the
// connection's Stats carry it.
func TestDebugLogsFallback(t *testing.T) {
	out := captureDebug(t, "INFO", "dial")
	useSpaceProvider(t)
	ln := listen(t, softConfig())
	echoServer(t, ln, 1)
	c, err := dialCfg(t, &Config{RDMAConnectTimeout: time.Hour}, ln.Addr().String(), 30*time.Second)
	require.NoError(t, err)
	log := out.String()
	assert.Contains(t, log, "provider chosen")
	assert.Contains(t, log, "fell back to soft")
	assert.Contains(t, log, "connection refused", "the reason")
	assert.Contains(t, log, "path=soft-")
	assert.Contains(t, c.Stats().Fallback, "connection refused")
	t.Log(log)
}

// Off, nothing is logged.
func TestDebugOff(t *testing.T) {
	out := captureDebug(t, "", "")
	c, s := pair(t, nil)
	c.Close()
	s.Close()
	assert.Empty(t, out.String())
}

// A soft connection that stays on TCP because the peer process runs as
// another uid says so: the listener logs the peer's uid.
func TestDebugLogsShmRefusedToOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the peer as another user")
	}
	out := captureDebug(t, "INFO", "shm")
	prev := soft.SetSharedMemory(true)
	defer soft.SetSharedMemory(prev)
	ln := listen(t, nil)
	// The test binary sits where only root may enter: copy it where
	// nobody (uid 65534) can run it.
	dir, err := os.MkdirTemp("", "rdma-debug-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "rdma.test")
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	cmd := testsupport.PeerCommand("debug-dialer", ln.Addr().String())
	cmd.Path, cmd.Args[0] = bin, bin
	cmd.Env = append(cmd.Env, "RDMA_SOFT_SHM=1", "HOME=/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	s, err := ln.Accept()
	require.NoError(t, err)
	_, err = io.Copy(s, s)
	require.NoError(t, err)
	s.Close()
	require.NoError(t, cmd.Wait())
	log := out.String()
	assert.Contains(t, log, "shared memory not used")
	assert.Contains(t, log, "uid 65534")
	t.Log(log)
}

func init() {
	// debug-dialer ADDR: dial ADDR on soft, echo a byte through it, close.
	testsupport.RegisterPeer("debug-dialer", func(args []string) int {
		d := Dialer{Config: softConfig(), Timeout: 10 * time.Second}
		c, err := d.Dial("rdma", args[0])
		if err != nil {
			return 1
		}
		defer c.Close()
		if _, err := c.Write([]byte{7}); err != nil {
			return 2
		}
		if err := c.(*Conn).CloseWrite(); err != nil {
			return 3
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return 4
		}
		return 0
	})
}
