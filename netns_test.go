package rdma

import (
	"bufio"
	"bytes"
	crand "crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/rdmanet/rdma/internal/netnstest"
)

// Tests across hosts: network namespaces joined by veth pairs through a
// bridge (internal/netnstest), each side a process of this test binary run
// inside its namespace with ip netns exec. The soft provider carries them,
// so the bytes cross the veth wire on TCP.

// netnsRoleEnv makes a run of the test binary one side of a netns test:
// "server ADDR", "client ADDR" or "idle ADDR".
const netnsRoleEnv = "RDMA_NETNS_ROLE"

// netnsChild runs the role named in the environment, if any, and reports
// whether it did: the netns tests call it first, as their child processes
// run the same test.
func netnsChild(t *testing.T) bool {
	role, addr, ok := strings.Cut(os.Getenv(netnsRoleEnv), " ")
	if !ok {
		return false
	}
	switch role {
	case "server":
		netnsServe(t, addr)
	case "client":
		netnsClient(t, addr)
	case "idle":
		netnsIdle(t, addr)
	default:
		t.Fatalf("unknown %s %q", netnsRoleEnv, role)
	}
	return true
}

// netnsServe listens at addr and serves until killed. The first byte of a
// conn picks what it gets: 'e' echo; 'p' pairing, two such conns spliced
// together (so that a client can get both ends of a pipe that crosses the
// wire twice; 'p' is followed by an 8-byte key, and the two conns that send
// the same key are spliced, as several clients pair at once); 's' one exchange, then a Read until it fails, reported on
// stdout.
func netnsServe(t *testing.T, addr string) {
	ln, err := Listen("rdma", addr)
	require.NoError(t, err)
	fmt.Println("LISTENING", ln.Addr(), ln.(*Listener).Provider())
	var mu sync.Mutex
	waiting := map[[8]byte]net.Conn{} // pairing conns by the key they sent
	for {
		c, err := ln.Accept()
		require.NoError(t, err)
		go func() {
			var mode [1]byte
			if _, err := io.ReadFull(c, mode[:]); err != nil {
				c.Close()
				return
			}
			switch mode[0] {
			case 'e':
				io.Copy(c, c)
				c.Close()
			case 'p':
				var key [8]byte
				if _, err := io.ReadFull(c, key[:]); err != nil {
					c.Close()
					return
				}
				mu.Lock()
				o := waiting[key]
				delete(waiting, key)
				if o == nil {
					waiting[key] = c
				}
				mu.Unlock()
				if o != nil {
					splice(o, c)
				}
			case 's':
				buf := make([]byte, 1024)
				if _, err := io.ReadFull(c, buf); err != nil {
					fmt.Println("FAILED", err)
					return
				}
				if _, err := c.Write(buf); err != nil {
					fmt.Println("FAILED", err)
					return
				}
				fmt.Println("READY", c.(*Conn).Provider())
				err := readErr(c)
				fmt.Printf("READERR %v\n", err)
				c.Close()
			default:
				c.Close()
			}
		}()
	}
}

// splice copies between a and b until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

func readErr(c net.Conn) error {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return err
		}
	}
}

func netnsDial(t *testing.T, addr string, mode ...byte) net.Conn {
	t.Helper()
	d := Dialer{Timeout: 20 * time.Second}
	c, err := d.Dial("rdma", addr)
	require.NoError(t, err)
	_, err = c.Write(mode)
	require.NoError(t, err)
	return c
}

// netnsClient checks data integrity over several concurrent echo conns,
// then runs nettest's conformance tests on pipes spliced by the server.
func netnsClient(t *testing.T, addr string) {
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := netnsDial(t, addr, 'e')
			defer c.Close()
			assert.Equal(t, ProviderSoft, c.(*Conn).Provider())
			rng := rand.New(rand.NewSource(int64(i)))
			msg := make([]byte, 2<<20+i*4099)
			rng.Read(msg)
			werr := make(chan error, 1)
			go func() {
				for b := msg; len(b) > 0; {
					n := min(len(b), 1+rng.Intn(200_000))
					if _, err := c.Write(b[:n]); err != nil {
						werr <- err
						return
					}
					b = b[n:]
				}
				werr <- c.(*Conn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			assert.NoError(t, err)
			assert.NoError(t, <-werr)
			assert.Equal(t, sha256.Sum256(msg), sha256.Sum256(got), "conn %d: %d bytes back of %d", i, len(got), len(msg))
		}()
	}
	wg.Wait()
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		key := make([]byte, 9)
		key[0] = 'p'
		crand.Read(key[1:])
		c1 = netnsDial(t, addr, key...)
		c2 = netnsDial(t, addr, key...)
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// netnsIdle makes one exchange with the server, says READY, then reads
// until the conn fails and reports it.
func netnsIdle(t *testing.T, addr string) {
	c := netnsDial(t, addr, 's')
	defer c.Close()
	buf := make([]byte, 1024)
	_, err := c.Write(buf)
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	fmt.Println("READY", c.(*Conn).Provider())
	fmt.Printf("READERR %v\n", readErr(c))
}

// child is a test binary running a role in a namespace.
type child struct {
	name  string
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan error
}

func startChild(t *testing.T, h *netnstest.Host, test, role string, env ...string) *child {
	t.Helper()
	c := &child{name: fmt.Sprintf("%s in %s", role, h.NS), lines: make(chan string, 1000), done: make(chan error, 1)}
	c.cmd = h.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1", "-test.timeout=3m")
	c.cmd.Env = append(os.Environ(), netnsRoleEnv+"="+role, ProviderEnv+"="+ProviderSoft)
	c.cmd.Env = append(c.cmd.Env, env...)
	stdout, err := c.cmd.StdoutPipe()
	require.NoError(t, err)
	c.cmd.Stderr = &lockedWriter{c}
	require.NoError(t, c.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			select {
			case c.lines <- sc.Text():
			default:
			}
		}
		c.done <- c.cmd.Wait()
		close(c.lines)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		for range c.lines {
		}
	})
	return c
}

type lockedWriter struct{ c *child }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.out.Write(b)
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// expect waits for a line starting with prefix and returns the rest.
func (c *child) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	tm := time.NewTimer(within)
	defer tm.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("%s exited before printing %q:\n%s", c.name, prefix, c.output())
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return strings.TrimSpace(rest)
			}
		case <-tm.C:
			t.Fatalf("%s: no %q within %v:\n%s", c.name, prefix, within, c.output())
		}
	}
}

// wait waits for the child to exit and fails t unless it succeeded.
func (c *child) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err
		require.NoError(t, err, "%s:\n%s", c.name, c.output())
	case <-time.After(within):
		t.Fatalf("%s still running after %v:\n%s", c.name, within, c.output())
	}
}

// An rdma server in one namespace, clients in two others: concurrent echo
// streams with their data checked, and nettest's conformance tests on pipes
// the server splices, all across the veth wire. One client leaves the soft
// provider's shared-memory path on (it must find out that it cannot reach
// the server's host that way and use TCP), the other turns it off.
func TestNetnsEcho(t *testing.T) {
	if netnsChild(t) {
		return
	}
	if testing.Short() {
		t.Skip("starts processes in network namespaces")
	}
	nw := netnstest.New(t, 3)
	addr := nw.Hosts[0].IP + ":7000"
	srv := startChild(t, nw.Hosts[0], "TestNetnsEcho", "server "+addr)
	t.Logf("server: %s", srv.expect(t, "LISTENING", 30*time.Second))
	var tx0 [3]int64
	for i, h := range nw.Hosts {
		tx0[i], _ = h.Counters()
	}
	c1 := startChild(t, nw.Hosts[1], "TestNetnsEcho", "client "+addr)
	c2 := startChild(t, nw.Hosts[2], "TestNetnsEcho", "client "+addr, "RDMA_SOFT_SHM=0")
	c1.wait(t, 2*time.Minute)
	c2.wait(t, 2*time.Minute)
	// Every byte echoed crossed the wire both ways: at least the 8 MiB of
	// echo streams each client sent left through its eth0.
	for i, h := range nw.Hosts {
		tx, rx := h.Counters()
		t.Logf("%s eth0: %d bytes out, %d in", h.NS, tx-tx0[i], rx)
		assert.Greater(t, tx-tx0[i], int64(8<<20), "%s: too little went out on its wire", h.NS)
	}
	for _, c := range []*child{c1, c2} {
		for _, sub := range []string{"BasicIO", "PingPong", "RacyRead", "WriteTimeout", "CloseTimeout", "ConcurrentMethods"} {
			assert.Contains(t, c.output(), "--- PASS: TestNetnsEcho/"+sub, "%s: nettest's %s", c.name, sub)
		}
	}
}

// A host that vanishes (its switch port goes down: nothing closed, no FIN,
// no RST): both ends of an idle connection across the wire get an error,
// not a hang, within the keepalive bound (Config.KeepAlive, 2 s, then the
// transport's retries: 8 ack timeouts of 268 ms).
func TestNetnsPeerVanishes(t *testing.T) {
	if netnsChild(t) {
		return
	}
	if testing.Short() {
		t.Skip("starts processes in network namespaces")
	}
	nw := netnstest.New(t, 2)
	addr := nw.Hosts[0].IP + ":7000"
	srv := startChild(t, nw.Hosts[0], "TestNetnsPeerVanishes", "server "+addr, "RDMA_SOFT_SHM=0")
	srv.expect(t, "LISTENING", 30*time.Second)
	cli := startChild(t, nw.Hosts[1], "TestNetnsPeerVanishes", "idle "+addr, "RDMA_SOFT_SHM=0")
	assert.Equal(t, ProviderSoft, cli.expect(t, "READY", 30*time.Second))
	assert.Equal(t, ProviderSoft, srv.expect(t, "READY", 30*time.Second))

	nw.Hosts[1].Unplug()
	start := time.Now()
	type res struct {
		who, err string
		took     time.Duration
	}
	results := make(chan res, 2)
	var wg sync.WaitGroup
	for _, c := range []*child{srv, cli} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Both wait at once (t.Fatalf is for the test's goroutine only,
			// hence no expect here).
			tm := time.NewTimer(30 * time.Second)
			defer tm.Stop()
			for {
				select {
				case l, ok := <-c.lines:
					if !ok {
						results <- res{c.name, "exited: " + c.output(), time.Since(start)}
						return
					}
					if rest, ok := strings.CutPrefix(l, "READERR"); ok {
						results <- res{c.name, strings.TrimSpace(rest), time.Since(start)}
						return
					}
				case <-tm.C:
					results <- res{c.name, "HANG: no error within 30 s", time.Since(start)}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(results)
	for r := range results {
		t.Logf("%s: Read failed after %v: %s", r.who, r.took.Round(time.Millisecond), r.err)
		assert.NotContains(t, r.err, "HANG", r.who)
		assert.NotEqual(t, "EOF", r.err, "%s: a vanished peer is not a clean close", r.who)
		assert.Less(t, r.took, 15*time.Second, "%s: beyond the keepalive bound", r.who)
	}
}
