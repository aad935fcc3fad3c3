package capi

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileEnv names the role a re-run of the test binary plays instead of
// running the tests (TestMain).
const hostileEnv = "CAPI_TEST_HOSTILE"

// runHostile plays role and returns the process's exit status.
func runHostile(role string) int {
	switch role {
	case "hoarder":
		return hoarder()
	}
	return 99
}

// hoarder is a server that exposes 4 KiB for write to its first peer,
// sends it the descriptor and never takes a notification, until its stdin
// closes. It prints its port first.
func hoarder() int {
	srv, err := Init("127.0.0.1", 0, 4096, true)
	if err != nil {
		return 1
	}
	defer srv.Close()
	fmt.Println(srv.Addr().(interface{ String() string }).String())
	if _, err := srv.AcceptPeer(); err != nil {
		return 2
	}
	m, err := srv.Alloc(4096)
	if err != nil {
		return 3
	}
	d, err := srv.Expose(0, m, 0, 4096, AccessWrite)
	if err != nil {
		return 4
	}
	if _, err := srv.Send(0, d[:]); err != nil {
		return 5
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// A peer that exposes memory and never takes its notifications (as nobody
// when the test runs as root) holds the writer no longer than the writer
// chooses: a notify that finds no credit times out (ErrTimeout), Free of
// the memory a blocked notify uses fails at once (ErrMemBusy) and keeps it,
// and once that notify has returned (the peer disconnected) Free frees it.
// Before, Free waited for the blocked notify, which waited for the peer:
// for ever.
func TestFreeNeverWaitsOnAPeer(t *testing.T) {
	if defaultTransport.name == tcpTransport.name {
		t.Skip("one-sided operations need rdma conns")
	}
	bin := os.Args[0]
	cmd := exec.Command(bin, "-test.run", "^$")
	cmd.Env = append(os.Environ(), hostileEnv+"=hoarder")
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "capi-hostile-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.NoError(t, os.Chmod(dir, 0o755))
		src, err := os.ReadFile(bin)
		require.NoError(t, err)
		cmd.Path = filepath.Join(dir, "capi.test")
		require.NoError(t, os.WriteFile(cmd.Path, src, 0o755))
		cmd.Dir = "/"
		cmd.Env = append(cmd.Env, "HOME=/")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outp, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(outp).ReadString('\n')
	require.NoError(t, err)
	_, portText, _ := strings.Cut(strings.TrimSpace(line), "127.0.0.1:")
	port, err := strconv.Atoi(portText)
	require.NoError(t, err, "port line %q", line)

	cl, err := Init("127.0.0.6", 0, 4096, false)
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.ConnectPeer("127.0.0.1", port)
	require.NoError(t, err)
	var d Desc
	n, err := cl.Recv(0, d[:])
	require.NoError(t, err)
	require.Equal(t, DescSize, n)
	local := alloc(t, cl, 4096)

	sent := 0
	for ; sent < 1000; sent++ {
		start := time.Now()
		_, err = cl.WriteNotifyTimeout(0, &d, 0, local, 0, 8, 1, 200*time.Millisecond)
		if err != nil {
			require.ErrorIs(t, err, ErrTimeout)
			assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
			break
		}
	}
	require.Positive(t, sent)
	require.LessOrEqual(t, sent, 128, "notifications beyond the peer's receive depth")
	// A plain write takes no credit.
	_, err = cl.WriteTimeout(0, &d, 0, local, 0, 8, time.Second)
	require.NoError(t, err)

	blocked := make(chan error, 1)
	go func() {
		_, err := cl.WriteNotify(0, &d, 0, local, 0, 8, 2)
		blocked <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-blocked:
		t.Fatalf("a notify without a credit returned: %v", err)
	default:
	}
	freed := make(chan error, 1)
	go func() { freed <- local.Free() }()
	select {
	case err := <-freed:
		require.ErrorIs(t, err, ErrMemBusy)
	case <-time.After(2 * time.Second):
		require.NoError(t, cl.DisconnectPeer(0)) // let the test end
		t.Fatal("Free of memory a blocked notify uses waited on the peer")
	}
	local.Bytes()[0] = 1 // still mapped, still the caller's
	require.NoError(t, cl.DisconnectPeer(0))
	select {
	case err := <-blocked:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked notify did not end with its connection")
	}
	require.NoError(t, local.Free(), "free again, once nothing uses it")
	_, err = cl.Write(0, &d, 0, local, 0, 8)
	require.Error(t, err)
}
