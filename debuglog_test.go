package rdma

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdma/internal/debuglog"
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
	debuglog.Set(level, subsys)
	t.Cleanup(func() {
		debuglog.Set("", "")
		SetDebugLogger(nil)
	})
	return &out
}

// The public LevelTrace is the level the logs use.
func TestDebugLevelTraceIsTheLogs(t *testing.T) {
	assert.Equal(t, debuglog.LevelTrace, LevelTrace)
}

func TestDebugLevels(t *testing.T) {
	for _, c := range []struct {
		level, subsys string
		sub           int
		at            slog.Level
		on            bool
	}{
		{"", "", debuglog.Dial, slog.LevelWarn, false},
		{"WARN", "", debuglog.Dial, slog.LevelWarn, true},
		{"WARN", "", debuglog.Dial, slog.LevelInfo, false},
		{"INFO", "dial,shm", debuglog.Shm, slog.LevelInfo, true},
		{"INFO", "dial,shm", debuglog.Ring, slog.LevelWarn, false},
		{"INFO", "^ring", debuglog.Ring, slog.LevelWarn, false},
		{"INFO", "^ring", debuglog.Conn, slog.LevelWarn, true},
		{"trace", "ALL", debuglog.Ring, LevelTrace, true},
	} {
		debuglog.Set(c.level, c.subsys)
		assert.Equal(t, c.on, debuglog.On(c.sub, c.at), "%+v", c)
	}
	debuglog.Set("", "")
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

// RDMA_DEBUG takes the numbers users type first (1 WARN, 2 INFO, 3
// TRACE); a value it does not know, in either variable, is warned about
// on stderr, once however often it is read, and leaves the logs off.
func TestDebugNumericLevelsAndUnknownValues(t *testing.T) {
	var warned syncBuffer
	prev := debuglog.SettingOut
	debuglog.SettingOut = &warned
	t.Cleanup(func() {
		debuglog.SettingOut = prev
		debuglog.Set("", "")
	})
	for _, c := range []struct {
		level string
		at    slog.Level
	}{{"1", slog.LevelWarn}, {"2", slog.LevelInfo}, {"3", LevelTrace}, {" 2 ", slog.LevelInfo}} {
		debuglog.Set(c.level, "")
		assert.True(t, debuglog.On(debuglog.Conn, c.at), "RDMA_DEBUG=%q logs level %v", c.level, c.at)
		assert.False(t, debuglog.On(debuglog.Conn, c.at-1), "RDMA_DEBUG=%q does not log below %v", c.level, c.at)
	}
	for _, off := range []string{"", "0", "off"} {
		debuglog.Set(off, "")
		assert.False(t, debuglog.On(debuglog.Conn, slog.LevelError), "RDMA_DEBUG=%q is off", off)
	}
	assert.Empty(t, warned.String(), "known values are not warned about")

	// Values no earlier run of the test gave (go test -count=N): a
	// warning is given once in the process.
	run := unknownSettingRuns.Add(1)
	level, subsys := fmt.Sprintf("verbose%d", run), fmt.Sprintf("rings%d", run)
	for range 3 {
		debuglog.Set(level, "dial,"+subsys)
	}
	assert.False(t, debuglog.On(debuglog.Conn, slog.LevelError), "an unknown level leaves the logs off")
	out := warned.String()
	assert.Equal(t, 1, strings.Count(out, fmt.Sprintf(`RDMA_DEBUG=%q is not a level`, level)), out)
	assert.Equal(t, 1, strings.Count(out, fmt.Sprintf(`RDMA_DEBUG_SUBSYS: %q is not a subsystem`, subsys)), out)
	assert.Equal(t, 2, strings.Count(out, "\n"), out)
}

// unknownSettingRuns counts TestDebugNumericLevelsAndUnknownValues' runs.
var unknownSettingRuns atomic.Int32

// With shared memory off on this side the log says so, not a catch-all.
func TestDebugShmOffOnThisSide(t *testing.T) {
	out := captureDebug(t, "INFO", "shm")
	prev := soft.SetSharedMemory(false)
	defer soft.SetSharedMemory(prev)
	c, s := pair(t, nil)
	c.Close()
	s.Close()
	log := out.String()
	assert.Contains(t, log, "shared memory not used")
	assert.Contains(t, log, "this side has shared memory off (RDMA_SOFT_SHM=0")
	assert.NotContains(t, log, "the peer did not take shared memory")
}

// A connection that starts on TCP says its move is still to come, and
// its move to shared memory is logged when it completes.
func TestDebugLogsMoveToShm(t *testing.T) {
	out := captureDebug(t, "INFO", "shm")
	prev := soft.SetSharedMemory(true)
	defer soft.SetSharedMemory(prev)
	c, s := pair(t, nil)
	defer c.Close()
	defer s.Close()
	if c.Stats().Path == "soft-shm" {
		t.Fatalf("the connection began on shared memory; this test needs one that moves there")
	}
	assert.Contains(t, out.String(), "moves to shared memory once it talks")
	// Talk until both ends are on shared memory.
	out64, in64 := make([]byte, 64<<10), make([]byte, 64<<10)
	deadline := time.Now().Add(20 * time.Second)
	for c.Stats().Path != "soft-shm" || s.Stats().Path != "soft-shm" {
		require.True(t, time.Now().Before(deadline), "the connection moved to shared memory")
		wrote := make(chan error, 1)
		go func() { _, err := c.Write(out64); wrote <- err }()
		_, err := io.ReadFull(s, in64)
		require.NoError(t, err)
		require.NoError(t, <-wrote)
	}
	require.Eventually(t, func() bool { return strings.Count(out.String(), "moved to shared memory") == 2 }, 5*time.Second, time.Millisecond,
		"each end logs its move once: %s", out)
	assert.Contains(t, out.String(), "local="+c.LocalAddr().String())
	assert.Contains(t, out.String(), "path=soft-shm")
}
