package collectives

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileEnv makes the test binary, run as a child, play a hostile host:
// "TRANSPORT ADDR LOCAL N" holds N conns to the bootstrap listener at ADDR,
// dialed from the IP LOCAL over TRANSPORT ("tcp" or "rdma"), without a
// word, dialing again each one the listener closes; it prints READY once
// all N have connected, and stops when its stdin closes.
const hostileEnv = "COLLECTIVES_TEST_HOSTILE"

func hostileMain() int {
	f := strings.Fields(os.Getenv(hostileEnv))
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "%s=%q: want TRANSPORT ADDR LOCAL N\n", hostileEnv, os.Getenv(hostileEnv))
		return 2
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	h := holdSilent(transportNamed(f[0]), f[1], f[2], n, stop)
	if err := h.wait(); err != nil {
		fmt.Printf("uid %d: %v\n", os.Getuid(), err)
		return 1
	}
	fmt.Printf("READY uid %d\n", os.Getuid())
	<-stop
	h.stop()
	return 0
}

func transportNamed(name string) transport {
	for _, bt := range bootTransports {
		if bt.name == name {
			return bt.tr
		}
	}
	panic("no transport " + name)
}

// silentHost is a host that keeps conns to a listener open and says
// nothing on them.
type silentHost struct {
	ctx   context.Context // ends when the host stops
	ready sync.WaitGroup  // every conn has connected once
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]bool
	err   error // the first dial that failed
}

// holdSilent keeps n conns from the IP local to addr open without a word,
// until done closes: a conn the listener closes is dialed again (after a
// pause, so that the churn does not take the machine).
func holdSilent(tr transport, addr, local string, n int, done <-chan struct{}) *silentHost {
	ctx, cancel := context.WithCancel(context.Background())
	h := &silentHost{ctx: ctx, open: map[net.Conn]bool{}}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		<-done
		cancel()
		h.mu.Lock()
		for c := range h.open {
			c.Close()
		}
		h.mu.Unlock()
	}()
	h.ready.Add(n)
	for i := 0; i < n; i++ {
		h.wg.Add(1)
		go h.hold(tr, addr, local)
	}
	return h
}

func (h *silentHost) hold(tr transport, addr, local string) {
	defer h.wg.Done()
	first := true
	connected := func() {
		if first {
			h.ready.Done()
			first = false
		}
	}
	defer connected()
	for {
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		c, err := dialRetry(ctx, tr, local, addr)
		cancel()
		h.mu.Lock()
		if err != nil || h.ctx.Err() != nil {
			if err != nil && h.err == nil && h.ctx.Err() == nil {
				h.err = err
			}
			h.mu.Unlock()
			if c != nil {
				c.Close()
			}
			return
		}
		h.open[c] = true
		h.mu.Unlock()
		connected()
		_, _ = io.Copy(io.Discard, c) // until the listener (or stop) closes it
		h.mu.Lock()
		delete(h.open, c)
		h.mu.Unlock()
		c.Close()
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// wait waits until every conn has connected once.
func (h *silentHost) wait() error {
	h.ready.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// stop waits for the host to stop, once done has closed.
func (h *silentHost) stop() { h.wg.Wait() }

// startHostileHost plays a hostile host at the IP local that holds n
// silent conns to the bootstrap listener at addr: as another user (uid
// 65534, a child process) where the test runs as root, else in the test's
// own process. It returns once all n have connected; cleanup stops it.
func startHostileHost(t *testing.T, trName, addr, local string, n int) {
	if os.Getuid() != 0 {
		t.Logf("not root: the hostile host runs in the test's process")
		done := make(chan struct{})
		h := holdSilent(transportNamed(trName), addr, local, n, done)
		t.Cleanup(func() {
			close(done)
			h.stop()
		})
		require.NoError(t, h.wait())
		return
	}
	bin := copyForNobody(t)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{hostileEnv + "=" + strings.Join([]string{trName, addr, local, strconv.Itoa(n)}, " "), "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		exited := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, stdout)
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the hostile host said nothing")
	require.Equal(t, "READY uid 65534\n", line)
}

// copyForNobody copies the test binary, which sits in a directory only
// root may enter, where nobody (uid 65534) can run it.
func copyForNobody(t *testing.T) string {
	dir, err := os.MkdirTemp("", "collectives-hostile-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "collectives.test")
	src, err := os.Open(os.Args[0])
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
	return bin
}

// A host without the job secret that holds more silent conns to the root
// than the root hears out at once (and dials again each one closed) delays
// no rank of another host: each host has a bound of its own, so the ranks
// find places at once. (The root used to hear out 256 conns in all, and to
// close those beyond: the ranks' Join failed at once with "bootstrap: EOF".)
func TestJoinDespiteSilentHost(t *testing.T) {
	for _, bt := range bootTransports {
		t.Run(bt.name, func(t *testing.T) {
			const n, silent = 4, maxHandshakes + 44
			secret := []byte("the job's secret")
			root := freeAddr(t, "127.0.0.1")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			gs := make([]*Group, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			join := func(r int) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := bt.b
					b.Secret = secret
					b.LocalAddr = "127.0.0." + strconv.Itoa(10+r)
					if r == 0 {
						b.LocalAddr = ""
					}
					gs[r], errs[r] = b.Join(ctx, r, n, root)
					if errs[r] != nil {
						cancel() // the others would wait for this one
					}
				}()
			}
			defer func() { closeAll(gs) }()
			join(0)
			startHostileHost(t, bt.name, root, "127.0.0.66", silent)
			start := time.Now()
			for r := 1; r < n; r++ {
				join(r)
			}
			wg.Wait()
			took := time.Since(start)
			t.Logf("Join took %v with %d silent conns from one host to the root", took, silent)
			for r := range gs {
				assert.NoError(t, errs[r], "rank %d", r) // every rank's error, to find the first cause
			}
			for r := range gs {
				require.NoError(t, errs[r], "rank %d", r)
			}
			require.Less(t, took, helloTimeout, "the ranks waited for the silent conns' hello timeout")
			checkGroup(t, gs)
		})
	}
}
