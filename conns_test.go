package rdma

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// openFDs counts this process's descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	d, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(d)
}

// needFDs raises the descriptor limit to n: the soft limit up to the hard
// one, and the hard one too where the process may (root, or
// CAP_SYS_RESOURCE). It skips the test, saying why, if neither will do.
func needFDs(t testing.TB, n int) {
	t.Helper()
	prev, err := raiseFDs(n)
	if err != nil {
		t.Skipf("needs %d descriptors: %v", n, err)
	}
	t.Cleanup(func() {
		// The hard limit stays raised (lowering it is for good); the
		// soft one goes back.
		var lim syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
			lim.Cur = prev
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
	})
}

// raiseFDs raises RLIMIT_NOFILE to at least n and returns the previous soft
// limit.
func raiseFDs(n int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	prev := lim.Cur
	if lim.Cur >= uint64(n) {
		return prev, nil
	}
	hard := lim.Max
	lim.Cur = uint64(n)
	lim.Max = max(lim.Max, lim.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return prev, fmt.Errorf("the hard RLIMIT_NOFILE is %d and cannot be raised: %w", hard, err)
	}
	return prev, nil
}

// manyConnsConfig is the Config of TestManyConnsHeld's connections: the
// smallest queues and rings Config allows, so that holding thousands needs
// little memory under the race detector (cmd/rdmaconns measures the
// default Config's figures); descriptors do not depend on them.
func manyConnsConfig() *Config {
	return &Config{Provider: ProviderSoft, RingSize: minRingSize, SendDepth: minDepth, RecvDepth: minDepth,
		KeepAlive: -1, PeerTimeout: -1}
}

// echoOne reads one byte from c and writes it back.
func echoOne(c net.Conn) error {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	_, err := c.Write(b[:])
	return err
}

func init() {
	testsupport.RegisterPeer("conns-server", connsServer)
}

// connsServer is TestManyConnsHeld's server process. Arguments: shm (0 or
// 1) and n. It listens, prints its address, accepts n connections, echoes
// a byte on each, prints "held F" (F: descriptors it gained), then holds
// them until its stdin closes.
func connsServer(args []string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "conns-server:", err)
		return 1
	}
	if len(args) != 2 {
		return fail(fmt.Errorf("want shm and n, got %q", args))
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return fail(err)
	}
	shm := args[0] == "1"
	soft.SetSharedMemory(shm)
	soft.SetSharedMemorySwitch(0) // on the rings from the start, not after 64 KiB
	perConn := 1
	if shm {
		perConn = 3
	}
	if _, err := raiseFDs(perConn*n + 512); err != nil {
		return fail(err)
	}
	lc := ListenConfig{Config: manyConnsConfig()}
	ln, err := lc.Listen(context.Background(), "rdma", "127.0.0.61:0")
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	fds0, err := countFDs()
	if err != nil {
		return fail(err)
	}
	fmt.Println(ln.Addr())
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		c, err := ln.Accept()
		if err != nil {
			return fail(err)
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := echoOne(c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return fail(err)
	}
	// The conns move to shared memory in the background: count once each
	// has (its exchange's unix socket is closed by then).
	for end := time.Now().Add(20 * time.Second); shm && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !slices.ContainsFunc(conns, func(c net.Conn) bool { return SoftCarrier(c) != "shm" }) {
			break
		}
	}
	fds, err := countFDs()
	if err != nil {
		return fail(err)
	}
	fmt.Println("held", fds-fds0)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func countFDs() (int, error) {
	d, err := os.ReadDir("/proc/self/fd")
	return len(d), err
}

// Ten thousand connections held by each of two processes (a client and a
// server) on soft's TCP path, and a thousand on shared memory, each with
// a byte echoed; on shared memory an endpoint holds at most three
// descriptors (its eventfd, the peer's, the handshake's TCP connection),
// on TCP one. Every descriptor and all registered memory come back once
// they are closed. Two processes, not one: 10,000 connections with both
// ends in one process need 20,000 descriptors, which is all some machines'
// hard limit allows. Under the race detector, 2,000 on TCP and 500 on
// shared memory (make test runs the test without it as well).
func TestManyConnsHeld(t *testing.T) {
	nTCP, nShm := 10000, 1000
	if raceEnabled {
		nTCP, nShm = 2000, 500
	}
	for _, tc := range []struct {
		name   string
		shm    bool
		n      int
		maxFDs int // per endpoint
	}{
		{"tcp", false, nTCP, 1},
		{"shm", true, nShm, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := soft.SetSharedMemory(tc.shm)
			defer soft.SetSharedMemory(prev)
			// Conns move to shared memory at once, not after 64 KiB.
			defer soft.SetSharedMemorySwitch(soft.SetSharedMemorySwitch(0))
			needFDs(t, tc.maxFDs*tc.n+512)
			shmArg := "0"
			if tc.shm {
				shmArg = "1"
			}
			srv := testsupport.PeerCommand("conns-server", shmArg, strconv.Itoa(tc.n))
			srv.Stderr = os.Stderr
			stdin, err := srv.StdinPipe()
			require.NoError(t, err)
			stdout, err := srv.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, srv.Start())
			defer func() {
				// A failed run may leave the server waiting for a
				// connection that never comes: end it, so that the
				// failure is reported rather than the test timing out.
				if t.Failed() {
					_ = srv.Process.Kill()
				}
				stdin.Close()
				_ = srv.Wait()
			}()
			lines := bufio.NewScanner(stdout)
			require.True(t, lines.Scan(), "the server's address")
			addr := lines.Text()

			cfg := manyConnsConfig()
			d := Dialer{Config: cfg}
			// What a process opens once is opened before the count.
			c, err := d.Dial("rdma", addr)
			require.NoError(t, err)
			_, err = c.Write([]byte{1})
			require.NoError(t, err)
			_, err = io.ReadFull(c, make([]byte, 1))
			require.NoError(t, err)
			c.Close()
			fds0, mem0 := openFDs(t), verbs.MemoryInUse()

			conns := make([]net.Conn, tc.n)
			defer func() {
				for _, c := range conns {
					if c != nil {
						c.Close()
					}
				}
			}()
			// The server takes n-1 more connections after the first,
			// which it counts too; one of ours stays unopened.
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, tc.n)
			const dialers = 8
			for w := range dialers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < tc.n-1; i += dialers {
						c, err := d.Dial("rdma", addr)
						if err != nil {
							errs <- fmt.Errorf("conn %d: %w", i, err)
							return
						}
						conns[i] = c
						b := [1]byte{byte(i)}
						if _, err := c.Write(b[:]); err != nil {
							errs <- err
							return
						}
						if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != byte(i) {
							errs <- fmt.Errorf("conn %d: echo %d: %v", i, b[0], err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			held := tc.n - 1
			t.Logf("%d connections set up in %v", held, time.Since(start))
			// They move to shared memory in the background.
			rings := ringMappings(t)
			for end := time.Now().Add(20 * time.Second); tc.shm && rings < 2*held && time.Now().Before(end); rings = ringMappings(t) {
				time.Sleep(10 * time.Millisecond)
			}
			fds := openFDs(t) - fds0
			require.True(t, lines.Scan(), "the server's count")
			var srvFDs int
			_, err = fmt.Sscanf(lines.Text(), "held %d", &srvFDs)
			require.NoError(t, err, "server said %q", lines.Text())
			t.Logf("%d connections on %s: %.2f descriptors per endpoint here, %.2f in the server",
				held, tc.name, float64(fds)/float64(held), float64(srvFDs)/float64(tc.n))
			assert.LessOrEqual(t, fds, tc.maxFDs*held, "descriptors here")
			assert.LessOrEqual(t, srvFDs, tc.maxFDs*tc.n, "descriptors in the server")
			// Each endpoint maps its own ring and its peer's.
			if tc.shm {
				assert.Equal(t, 2*held, rings, "shared-memory ring mappings")
			} else {
				assert.Zero(t, rings, "shared-memory ring mappings")
			}
			for i, c := range conns {
				if c != nil {
					c.Close()
					conns[i] = nil
				}
			}
			assert.Eventually(t, func() bool { return openFDs(t) <= fds0 && verbs.MemoryInUse() <= mem0 },
				30*time.Second, 20*time.Millisecond, "descriptors or registered memory left after closing every connection")
		})
	}
}

// ringMappings counts the soft provider's shared-memory ring mappings in
// this process.
func ringMappings(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return bytes.Count(b, []byte("/memfd:rdma-soft-ring "))
}

// Every endpoint carries a Conn, and with thousands of them each size class
// step is resident memory and page faults at setup: a Conn stays within the
// runtime's 2048-byte size class (its poll batch is what would push it out).
func TestConnFitsItsSizeClass(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Conn{}), uintptr(2048))
}
