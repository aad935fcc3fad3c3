package collectives

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transports of the bootstrap tests: kernel TCP, and rdma conns on the
// software provider.
var bootTransports = []struct {
	name string
	b    Bootstrap
	tr   transport
}{
	{"tcp", Bootstrap{TCP: true}, tcpTransport},
	{"rdma", Bootstrap{Config: &rdma.Config{Provider: "soft"}}, rdmaTransport(&rdma.Config{Provider: "soft"})},
}

func TestJoinWithSecret(t *testing.T) {
	for _, bt := range bootTransports {
		t.Run(bt.name, func(t *testing.T) {
			const n = 4
			gs := joinAll(t, n, func(ctx context.Context, rank int, root string) (*Group, error) {
				b := bt.b
				b.Secret = []byte("s3cret")
				return b.Join(ctx, rank, n, root)
			})
			checkGroup(t, gs)
		})
	}
}

// Join's fixed signature takes the secret from RDMA_JOB_SECRET.
func TestJoinSecretFromEnvironment(t *testing.T) {
	t.Setenv(SecretEnv, "from the environment")
	const n = 3
	root := freeAddr(t, "127.0.0.1")
	// A rank with another secret is refused ...
	refused := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b := Bootstrap{Config: &rdma.Config{Provider: "soft"}, Secret: []byte("not it")}
		g, err := b.Join(ctx, 1, n, root)
		if g != nil {
			g.Close()
		}
		refused <- err
	}()
	var once sync.Once
	gs := joinAllAt(t, n, root, func(ctx context.Context, rank int, root string) (*Group, error) {
		if rank != 0 {
			once.Do(func() {
				err := <-refused
				require.ErrorIs(t, err, errRefused)
				require.ErrorContains(t, err, "wrong job secret")
			})
		}
		return Join(ctx, rank, n, root, &rdma.Config{Provider: "soft"})
	})
	checkGroup(t, gs)
}

// intruderEnv makes the test binary, run as a child, try to join as rank
// 1 with a wrong secret; it prints the error it got.
const intruderEnv = "COLLECTIVES_TEST_INTRUDER"

func intruderMain() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	size, _ := strconv.Atoi(os.Getenv("RDMA_WORLD_SIZE"))
	b := Bootstrap{Config: &rdma.Config{Provider: "soft"}, Secret: []byte(os.Getenv(intruderEnv))}
	g, err := b.Join(ctx, 1, size, os.Getenv("RDMA_ROOT_ADDR"))
	if err == nil {
		g.Close()
		fmt.Println("JOINED")
		return 0
	}
	fmt.Printf("uid %d: %v\n", os.Getuid(), err)
	if errors.Is(err, errRefused) {
		return 0
	}
	return 1
}

// A process of another user with a wrong secret claims rank 1 before the
// real rank 1 comes: the root refuses it, and the job completes.
func TestJoinRefusesWrongSecretFromAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the intruder as another user") // CI runs as root
	}
	bin := copyForNobody(t)

	const n = 3
	root := freeAddr(t, "127.0.0.1")
	secret := []byte("the job's secret")
	var rootG *Group
	rootErr := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		b := Bootstrap{Config: &rdma.Config{Provider: "soft"}, Secret: secret}
		var err error
		rootG, err = b.Join(ctx, 0, n, root)
		rootErr <- err
	}()

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{intruderEnv + "=a guess", "RDMA_WORLD_SIZE=" + strconv.Itoa(n), "RDMA_ROOT_ADDR=" + root, "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "intruder: %s", out)
	require.Contains(t, string(out), "uid 65534: ")
	require.Contains(t, string(out), "the root refused this rank: \"wrong job secret")

	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := Bootstrap{Config: &rdma.Config{Provider: "soft"}, Secret: secret}
			gs[r], errs[r] = b.Join(ctx, r, n, root)
		}()
	}
	wg.Wait()
	errs[0] = <-rootErr
	gs[0] = rootG
	defer closeAll(gs)
	for r := range gs {
		require.NoError(t, errs[r], "rank %d", r)
	}
	checkGroup(t, gs)
}

// silentConns opens n conns to addr over tr that never say a word; close
// them with closeConns.
func silentConns(tr transport, addr string, n int) ([]net.Conn, error) {
	var cs []net.Conn
	for len(cs) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := dialRetry(ctx, tr, "", addr)
		cancel()
		if err != nil {
			return cs, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeConns(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// Fifty silent conns to the root and to every rank's listener, and one
// with a wrong secret to each listener, delay nobody for long: every conn
// is heard out in a goroutine of its own under its own deadline. (One conn
// at a time, each silent one held the listener for the 10 s hello timeout:
// 500 s, far past the 150 s that ctx gives a loaded machine.) Fifty is more
// than one host's places (maxHandshakesPerHost), and the ranks dial from
// the silent conns' host: a rank turned away dials again, and takes the
// place of a silent conn once that has held it for silentAfter.
func TestJoinSilentConnectionsDelayNobody(t *testing.T) {
	for _, bt := range bootTransports {
		t.Run(bt.name, func(t *testing.T) {
			const n, silent = 4, 50
			secret := []byte("the job's secret")
			root := freeAddr(t, "127.0.0.1")
			var mu sync.Mutex
			var intruders sync.WaitGroup
			intruderErrs := map[int]error{}
			var silenced []net.Conn
			defer func() { closeConns(silenced) }()
			testHookListening = func(rank int, addr string) {
				cs, err := silentConns(bt.tr, addr, silent)
				mu.Lock()
				silenced = append(silenced, cs...)
				mu.Unlock()
				if err != nil {
					t.Errorf("silent conns to rank %d: %v", rank, err)
				}
				intruders.Add(1)
				go func() {
					defer intruders.Done()
					err := intrude(bt.tr, addr, rank)
					mu.Lock()
					intruderErrs[rank] = err
					mu.Unlock()
				}()
			}
			defer func() { testHookListening = nil }()

			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			gs := make([]*Group, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := bt.b
				b.Secret = secret
				gs[0], errs[0] = b.Join(ctx, 0, n, root)
			}()
			cs, err := silentConns(bt.tr, root, silent)
			mu.Lock()
			silenced = append(silenced, cs...)
			mu.Unlock()
			require.NoError(t, err)
			start := time.Now()
			for r := 1; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					b := bt.b
					b.Secret = secret
					gs[r], errs[r] = b.Join(ctx, r, n, root)
				}()
			}
			wg.Wait()
			t.Logf("Join took %v with %d silent conns to the root and %d to each rank's listener (the test's own dials to those included)", time.Since(start), silent, silent)
			defer closeAll(gs)
			for r := range gs {
				require.NoError(t, errs[r], "rank %d", r)
			}
			checkGroup(t, gs)
			intruders.Wait()
			for r := 1; r < n; r++ {
				assert.Error(t, intruderErrs[r], "an intruder at rank %d's listener got in", r)
			}
		})
	}
}

// intrude dials a rank's listener and runs the mesh handshake with a wrong
// secret, claiming to be rank 1 of the session it cannot know.
func intrude(tr transport, addr string, rank int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := tr.dial(ctx, "", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return meshDial(c, newProver([]byte("a guess")), 1, 4, token{})
}
