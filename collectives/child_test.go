package collectives

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

// Ranks in separate processes: the test binary runs itself once per rank
// as the peer rankPeer, with the launcher's environment.
const (
	rankPeer = "collectives-rank"
	dieEnv   = "COLLECTIVES_TEST_DIE" // this rank exits in the middle of an operation
)

func init() { testsupport.RegisterPeer(rankPeer, func([]string) int { return childMain() }) }

func childMain() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := childRun(ctx); err != nil {
		fmt.Println("ERROR:", err)
		return 1
	}
	fmt.Println("OK")
	fmt.Println("ENGINE", childEngine)
	return 0
}

// childEngine names the engine the rank's group ran on: "shm" (one
// segment), "hierarchical" (one per host) or "conns".
var childEngine string

func engineOf(g *Group) string {
	switch {
	case g.shm != nil:
		return "shm"
	case g.hier != nil:
		return "hierarchical"
	}
	return "conns"
}

func childRun(ctx context.Context) error {
	g, err := JoinFromEnv(ctx, nil)
	if err != nil {
		return err
	}
	defer g.Close()
	childEngine = engineOf(g)
	r := g.Rank()
	if os.Getenv(dieEnv) == strconv.Itoa(r) {
		// Take part in the first barrier, then die while the others reduce.
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		os.Exit(3)
	}
	if os.Getenv(dieEnv) != "" {
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		buf := make([]float64, 1<<18)
		for i := 0; i < 1000; i++ {
			if err := AllReduce(ctx, g, buf, buf, Sum); err != nil {
				return err
			}
		}
		return errors.New("a rank died, yet every operation succeeded")
	}

	return childOps(ctx, g)
}

// childOps is what a rank runs after its Join, with data and checks that
// every rank derives from its rank alone, so that ranks in this process and
// in child processes make one group: AllReduce, AllToAll, Barrier.
func childOps(ctx context.Context, g *Group) error {
	n, r := g.Size(), g.Rank()
	buf := make([]float64, 100003)
	for i := range buf {
		buf[i] = float64(r*i%7) - 3
	}
	if err := AllReduce(ctx, g, buf, buf, Sum); err != nil {
		return err
	}
	for i := range buf {
		var want float64
		for q := 0; q < n; q++ {
			want += float64(q*i%7) - 3
		}
		if buf[i] != want {
			return fmt.Errorf("rank %d: AllReduce element %d is %v, want %v", r, i, buf[i], want)
		}
	}
	send, recv := make([]byte, n*1000), make([]byte, n*1000)
	for i := range send {
		send[i] = byte(r ^ i/1000)
	}
	if err := g.AllToAll(ctx, send, recv); err != nil {
		return err
	}
	for i := range recv {
		if recv[i] != byte(i/1000^r) {
			return fmt.Errorf("rank %d: AllToAll byte %d is %d", r, i, recv[i])
		}
	}
	if err := childLargeOps(ctx, g); err != nil {
		return err
	}
	return g.Barrier(ctx)
}

// childLargeOps runs the operations at sizes where a group spread over
// hosts takes its hierarchical paths (a split AllReduce in pieces, the
// counterparts' Broadcast, AllGather and AllToAll), with checks.
func childLargeOps(ctx context.Context, g *Group) error {
	n, r := g.Size(), g.Rank()
	buf := make([]float32, 1<<20) // 4 MiB: two pieces
	for i := range buf {
		buf[i] = float32((r + i) % 5)
	}
	if err := AllReduce(ctx, g, buf, buf, Sum); err != nil {
		return err
	}
	for i := range buf {
		var want float32
		for q := range n {
			want += float32((q + i) % 5)
		}
		if buf[i] != want {
			return fmt.Errorf("rank %d: 4 MiB AllReduce element %d is %v, want %v", r, i, buf[i], want)
		}
	}
	const blk = 70_000
	val := func(from, to, i int) byte { return byte(from*31 + to*7 + i%251) }
	send, recv := make([]byte, n*blk), make([]byte, n*blk)
	for to := range n {
		for i := range blk {
			send[to*blk+i] = val(r, to, i)
		}
	}
	if err := g.AllToAll(ctx, send, recv); err != nil {
		return err
	}
	for from := range n {
		for i := range blk {
			if got := recv[from*blk+i]; got != val(from, r, i) {
				return fmt.Errorf("rank %d: AllToAll byte %d of rank %d's block is %d", r, i, from, got)
			}
		}
	}
	if err := g.AllGather(ctx, send[r*blk:(r+1)*blk], recv); err != nil {
		return err
	}
	for from := range n {
		for i := range blk {
			if got := recv[from*blk+i]; got != val(from, from, i) {
				return fmt.Errorf("rank %d: AllGather byte %d of rank %d's block is %d", r, i, from, got)
			}
		}
	}
	root := n - 1
	for i := range recv {
		recv[i] = 0
		if r == root {
			recv[i] = byte(i % 253)
		}
	}
	if err := g.Broadcast(ctx, root, recv); err != nil {
		return err
	}
	for i := range recv {
		if recv[i] != byte(i%253) {
			return fmt.Errorf("rank %d: Broadcast byte %d is %d", r, i, recv[i])
		}
	}
	return nil
}

// startRanks runs n ranks of the test binary with extra environment.
func startRanks(t *testing.T, n int, extra ...string) []*exec.Cmd {
	root := freeAddr(t, "127.0.0.1")
	cmds := make([]*exec.Cmd, n)
	for r := range cmds {
		cmd := testsupport.PeerCommand(rankPeer)
		cmd.Env = append(cmd.Env,
			"RDMA_RANK="+strconv.Itoa(r), "RDMA_WORLD_SIZE="+strconv.Itoa(n),
			"RDMA_ROOT_ADDR="+root)
		cmd.Env = append(cmd.Env, extra...)
		cmds[r] = cmd
	}
	return cmds
}

// combinedOutputs runs cmds at once; outs[i] gets command i's combined
// output and exit status when it ends.
func combinedOutputs(cmds []*exec.Cmd) (outs []chan string) {
	outs = make([]chan string, len(cmds))
	for i, cmd := range cmds {
		outs[i] = make(chan string, 1)
		go func() {
			out, err := cmd.CombinedOutput()
			outs[i] <- fmt.Sprintf("%s (exit: %v)", out, err)
		}()
	}
	return outs
}

func TestRanksInSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 4
	for _, algo := range []string{"stream", "shm"} {
		t.Run(algo, func(t *testing.T) {
			cmds := startRanks(t, n, AlgoEnv+"="+algo)
			outs := combinedOutputs(cmds)
			engine := map[string]string{"stream": "conns", "shm": "shm"}[algo]
			for r := range cmds {
				out := <-outs[r]
				require.True(t, strings.HasPrefix(out, "OK\n"), "rank %d: %s", r, out)
				assert.Contains(t, out, "ENGINE "+engine+"\n", "rank %d", r)
			}
		})
	}
}

// A rank process that exits in the middle makes every other one fail with
// an error naming it.
func TestRankProcessDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	// On the same-host engine the survivors learn of the death from the
	// dead process's pidfd, not from its conns. Two ranks on a host with
	// a CPU for each reduce by single copy, in one step (shm_single.go).
	for _, c := range []struct {
		algo    string
		n, dead int
	}{{"stream", 4, 2}, {"shm", 4, 2}, {"shm", 2, 1}} {
		n, dead, algo := c.n, c.dead, c.algo
		t.Run(fmt.Sprintf("%s/n=%d", algo, n), func(t *testing.T) {
			cmds := startRanks(t, n, dieEnv+"="+strconv.Itoa(dead), AlgoEnv+"="+algo)
			outs := combinedOutputs(cmds)
			named := 0
			for r := range cmds {
				out := <-outs[r]
				if r == dead {
					require.Contains(t, out, "exit status 3")
					continue
				}
				// Every survivor fails, naming the rank it lost. That is the dead
				// one for the ranks it talked to; a rank may instead lose one that
				// gave up on the dead rank first and closed its conns (rank 3
				// before rank 0 in a ring), and names that one.
				require.Contains(t, out, "ERROR:", "rank %d", r)
				require.Regexp(t, `rank \d+:`, out, "rank %d names no rank", r)
				if strings.Contains(out, "rank "+strconv.Itoa(dead)+":") {
					named++
				}
				t.Logf("rank %d: %s", r, out)
			}
			assert.NotZero(t, named, "no survivor named the dead rank %d", dead)
		})
	}
}
