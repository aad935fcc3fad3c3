package collectives

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/netnstest"
	"github.com/rdmanet/rdma/internal/testsupport"
)

// Groups across hosts: one rank per network namespace (internal/netnstest:
// veth pairs through a bridge), each rank a process of this test binary run
// in its namespace with ip netns exec, over the soft provider with its
// shared-memory path off, so that every byte crosses the veth wire.

// netnsRankPeer is a rank that joins, says JOINED, then all-reduces until
// an operation fails and says how.
const netnsRankPeer = "collectives-netns-rank"

func init() { testsupport.RegisterPeer(netnsRankPeer, func([]string) int { netnsRank(); return 0 }) }

// rankCmd runs the test binary in h's namespace as the peer called peer,
// rank r of n.
func rankCmd(h *netnstest.Host, r, n int, root, peer string) *exec.Cmd {
	cmd := testsupport.PeerCommandVia(h.Exec(), peer)
	cmd.Env = append(cmd.Env,
		"RDMA_RANK="+strconv.Itoa(r), "RDMA_WORLD_SIZE="+strconv.Itoa(n),
		"RDMA_ROOT_ADDR="+root, "RDMA_LOCAL_ADDR="+h.IP,
		"RDMA_PROVIDER=soft", "RDMA_SOFT_SHM=0")
	return cmd
}

// Four ranks on four hosts: Join, AllReduce and AllToAll with their results
// checked (childRun), across the wire.
func TestNetnsGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes in network namespaces")
	}
	const n = 4
	nw := netnstest.New(t, n)
	root := nw.Hosts[0].IP + ":7100"
	cmds := make([]*exec.Cmd, n)
	for r, h := range nw.Hosts {
		cmds[r] = rankCmd(h, r, n, root, rankPeer)
	}
	outs := combinedOutputs(cmds)
	for r := range outs {
		select {
		case out := <-outs[r]:
			require.True(t, strings.HasPrefix(out, "OK\n"), "rank %d: %s", r, out)
		case <-time.After(2 * time.Minute):
			t.Fatalf("rank %d: no result within 2 minutes", r)
		}
	}
	for _, h := range nw.Hosts {
		tx, rx := h.Counters()
		t.Logf("%s eth0: %d bytes out, %d in", h.NS, tx, rx)
		// Each rank's AllReduce alone sends more than its 800 KB vector.
		assert.Greater(t, tx, int64(800_000), h.NS)
	}
}

// Two hosts of two ranks each (ranks 0 and 2 on one, 1 and 3 on the
// other): each host's ranks share a segment and AllReduce is hierarchical;
// the results are checked (childRun), and every rank ran on that engine.
func TestNetnsHierarchicalGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes in network namespaces")
	}
	const n = 4
	nw := netnstest.New(t, 2)
	// Two ranks of a host reach each other through lo: up, but without its
	// 127.0.0.0/8 route, so that the other host's 127.199.0.x stays on eth0.
	for _, h := range nw.Hosts {
		for _, args := range [][]string{
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", h.NS, "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local"},
		} {
			out, err := exec.Command("ip", args...).CombinedOutput()
			require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
		}
	}
	root := nw.Hosts[0].IP + ":7100"
	cmds := make([]*exec.Cmd, n)
	for r := range cmds {
		cmds[r] = rankCmd(nw.Hosts[r%2], r, n, root, rankPeer)
	}
	outs := combinedOutputs(cmds)
	for r := range outs {
		select {
		case out := <-outs[r]:
			assert.True(t, strings.HasPrefix(out, "OK\n"), "rank %d: %s", r, out)
			assert.Contains(t, out, "ENGINE hierarchical\n", "rank %d", r)
		case <-time.After(2 * time.Minute):
			t.Fatalf("rank %d: no result within 2 minutes", r)
		}
	}
}

// netnsRank is the rank process of TestNetnsGroupHostVanishes.
func netnsRank() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, err := JoinFromEnv(ctx, nil)
	if err != nil {
		fmt.Println("JOINFAILED", err)
		return
	}
	defer g.Close()
	fmt.Println("JOINED")
	buf := make([]float64, 1<<15)
	for i := 0; ; i++ {
		if err := AllReduce(ctx, g, buf, buf, Sum); err != nil {
			fmt.Printf("FAILED after %d all-reduces: %v\n", i, err)
			return
		}
	}
}

// A host that vanishes (its switch port goes down, nothing closed) in the
// middle of a run of all-reduces: every other rank's operation fails with an
// error instead of hanging, within the keepalive bound of the conns.
func TestNetnsGroupHostVanishes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes in network namespaces")
	}
	const n, gone = 4, 2
	nw := netnstest.New(t, n)
	root := nw.Hosts[0].IP + ":7100"
	type line struct {
		rank int
		text string
		at   time.Time
	}
	lines := make(chan line, 100)
	var outMu sync.Mutex
	var all bytes.Buffer
	var wg sync.WaitGroup
	for r, h := range nw.Hosts {
		cmd := rankCmd(h, r, n, root, netnsRankPeer)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = cmd.Stdout
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				outMu.Lock()
				fmt.Fprintf(&all, "rank %d: %s\n", r, sc.Text())
				outMu.Unlock()
				lines <- line{r, sc.Text(), time.Now()}
			}
		}()
	}
	output := func() string {
		outMu.Lock()
		defer outMu.Unlock()
		return all.String()
	}
	next := func(within time.Duration) line {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(within):
			t.Fatalf("nothing from the ranks within %v:\n%s", within, output())
		}
		return line{}
	}
	for joined := 0; joined < n; {
		l := next(time.Minute)
		if l.text == "JOINED" {
			joined++
		} else if strings.HasPrefix(l.text, "JOINFAILED") || strings.HasPrefix(l.text, "FAILED") {
			t.Fatalf("rank %d: %s\n%s", l.rank, l.text, output())
		}
	}
	time.Sleep(300 * time.Millisecond) // well into the all-reduces
	nw.Hosts[gone].Unplug()
	start := time.Now()
	failed := map[int]bool{}
	report := func(l line) {
		failed[l.rank] = true
		t.Logf("rank %d (%s): %v after the unplug: %s", l.rank, nw.Hosts[l.rank].IP, l.at.Sub(start).Round(time.Millisecond), l.text)
	}
	for survivors := 0; survivors < n-1; {
		l := next(30 * time.Second)
		if !strings.HasPrefix(l.text, "FAILED") || failed[l.rank] {
			continue
		}
		report(l)
		if l.rank != gone {
			survivors++
			assert.Less(t, l.at.Sub(start), 20*time.Second, "rank %d: beyond the keepalive bound", l.rank)
		}
	}
	// The vanished rank is cut off from everyone: it fails too (only
	// reported; the survivors are what the test is about).
	for !failed[gone] {
		select {
		case l := <-lines:
			if strings.HasPrefix(l.text, "FAILED") && l.rank == gone {
				report(l)
			}
		case <-time.After(15 * time.Second):
			t.Logf("rank %d (unplugged): no failure reported within 15 s more", gone)
			failed[gone] = true
		}
	}
}
