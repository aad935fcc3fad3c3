package rdma

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs/soft"
)

// helperEnv makes the test binary act as a peer process: "mode addr".
const helperEnv = "RDMA_TEST_PEER"

// runHelper is the peer process: it dials addr and then, by mode, streams
// forever ("stream") or writes a little and idles ("idle").
func runHelper() {
	mode, addr, _ := strings.Cut(os.Getenv(helperEnv), " ")
	d := Dialer{Config: testConfig(), Timeout: 10 * time.Second}
	c, err := d.Dial("rdma", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(2)
	}
	buf := make([]byte, 32<<10)
	switch mode {
	case "stream":
		for {
			if _, err := c.Write(buf); err != nil {
				os.Exit(3)
			}
		}
	case "idle":
		if _, err := c.Write(buf[:1024]); err != nil {
			os.Exit(3)
		}
		time.Sleep(time.Hour)
	}
	os.Exit(4)
}

// startPeer runs the test binary as a peer process that dials ln.
func startPeer(t *testing.T, mode string, ln *Listener, env []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode+" "+ln.Addr().String())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// readUntilError reads c until an error and returns it with the time taken
// after start.
func readUntilError(c *Conn, start time.Time) (error, time.Duration) {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return err, time.Since(start)
		}
	}
}

// softTransports runs f once per transport the soft provider has between
// two processes on one host: shared memory (its default) and TCP. env is
// what a peer process needs in its environment to match.
func softTransports(t *testing.T, f func(t *testing.T, env []string)) {
	if p := testConfig().Provider; p != ProviderSoft {
		t.Run(p, func(t *testing.T) { f(t, nil) }) // the VM: one run, on its provider
		return
	}
	t.Run("shm", func(t *testing.T) { f(t, nil) })
	t.Run("tcp", func(t *testing.T) {
		prev := soft.SetSharedMemory(false)
		defer soft.SetSharedMemory(prev)
		f(t, []string{"RDMA_SOFT_SHM=0"})
	})
}

// A peer killed mid-stream: the survivor's Read fails (not io.EOF) within
// 10 s, and the listener goes on serving.
func TestPeerKilled(t *testing.T) {
	softTransports(t, func(t *testing.T, env []string) {
		ln := listen(t, nil)
		cmd := startPeer(t, "stream", ln, env)
		c, err := ln.AcceptRDMA()
		require.NoError(t, err)
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 4<<20))
		require.NoError(t, err)

		require.NoError(t, cmd.Process.Kill())
		err, took := readUntilError(c, time.Now())
		assert.NotEqual(t, io.EOF, err)
		assert.Less(t, took, 10*time.Second)
		t.Logf("survivor's Read: %v after %v", err, took)

		checkServes(t, ln)
	})
}

// A peer that stops answering without closing anything (SIGSTOP: its
// sockets stay open): the keepalive finds out within 10 s.
func TestPeerSilent(t *testing.T) {
	softTransports(t, func(t *testing.T, env []string) {
		ln := listen(t, nil)
		cmd := startPeer(t, "idle", ln, env)
		c, err := ln.AcceptRDMA()
		require.NoError(t, err)
		defer c.Close()
		_, err = io.ReadFull(c, make([]byte, 1024))
		require.NoError(t, err)

		require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
		err, took := readUntilError(c, time.Now())
		assert.NotEqual(t, io.EOF, err)
		assert.False(t, errors.Is(err, os.ErrDeadlineExceeded))
		assert.Less(t, took, 10*time.Second)
		t.Logf("survivor's Read: %v after %v", err, took)

		checkServes(t, ln)
	})
}

// checkServes makes sure ln still accepts and echoes.
func checkServes(t *testing.T, ln *Listener) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, err := ln.Accept()
		if !assert.NoError(t, err) {
			return
		}
		defer s.Close()
		io.Copy(s, s)
	}()
	c := dial(t, ln, nil)
	_, err := c.Write([]byte("still there?"))
	require.NoError(t, err)
	buf := make([]byte, 12)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	assert.Equal(t, "still there?", string(buf))
	require.NoError(t, c.Close())
	<-done
}
