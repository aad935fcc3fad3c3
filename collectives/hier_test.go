//go:build linux

package collectives

import (
	"context"
	"math"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newHierGroups makes n ranks in this process whose host identities are
// hostOf(rank), set up as Join does in mode auto.
func newHierGroups(t testing.TB, n int, hostOf func(r int) byte) []*Group {
	conns := tcpMesh(t, n)
	gs := make([]*Group, n)
	for i := range gs {
		g, err := NewGroup(i, conns[i])
		require.NoError(t, err)
		gs[i] = g
	}
	t.Cleanup(func() { closeAll(gs) })
	mustAll(t, gs, func(g *Group) error {
		return attachShmAs(testCtx(t), g, conns[g.Rank()], "auto", [32]byte{hostOf(g.Rank())})
	})
	return gs
}

// Two hosts, ranks 0 and 2 on one and 1 and 3 on the other: each host
// shares a segment, the leaders are ranks 0 and 1, and AllReduce gives
// every rank the same bits, right, at the sizes of both of the leaders'
// algorithms, of several segment chunks and of the split among all ranks
// (100,003 elements). The other operations still run over the conns.
func TestHierarchicalAllReduce(t *testing.T) {
	const n = 4
	gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%2) })
	for r, g := range gs {
		require.Nil(t, g.shm, "rank %d", r)
		require.NotNil(t, g.hier, "rank %d", r)
		require.NotNil(t, g.hier.team, "rank %d", r)
		assert.Equal(t, []int{0, 1}, g.hier.leaders, "rank %d", r)
		assert.Equal(t, map[bool]int{true: r, false: -1}[r < 2], g.hier.lead, "rank %d", r)
		// Large AllReduces split where ranks can read each other's memory:
		// rank r works with the rank of its local index on the other host.
		var b [2]byte
		canRead := readPeer(os.Getpid(), b[:1], uint64(uintptr(unsafe.Pointer(&b[1])))) == nil
		assert.Equal(t, canRead, g.hier.split, "rank %d", r)
		assert.Equal(t, []int{r / 2 * 2, r/2*2 + 1}, g.hier.peers, "rank %d", r)
		assert.Equal(t, r%2, g.hier.hostIdx, "rank %d", r)
	}
	ctx := testCtx(t)
	for _, count := range []int{1, 7, 1000, 100_003} {
		// Non-integer values: sums whose bits depend on the order.
		bufs := make([][]float64, n)
		for r := range bufs {
			bufs[r] = make([]float64, count)
			for i := range bufs[r] {
				bufs[r][i] = float64(splitmix64(uint64(r*count+i))%1e6) / 7
			}
		}
		want := make([]float64, count)
		for i := range want {
			want[i] = (bufs[0][i] + bufs[2][i]) + (bufs[1][i] + bufs[3][i])
		}
		mustAll(t, gs, func(g *Group) error { b := bufs[g.Rank()]; return AllReduce(ctx, g, b, b, Sum) })
		for r := range n {
			for i := range want {
				if math.Float64bits(bufs[r][i]) != math.Float64bits(want[i]) {
					t.Fatalf("%d elements: rank %d element %d is %v, want %v", count, r, i, bufs[r][i], want[i])
				}
			}
		}
	}
	ints := make([][]int32, n)
	mustAll(t, gs, func(g *Group) error {
		ints[g.Rank()] = []int32{int32(g.Rank()), 5}
		out := make([]int32, 2)
		if err := AllReduce(ctx, g, ints[g.Rank()], out, Max); err != nil {
			return err
		}
		ints[g.Rank()] = out
		return nil
	})
	for r := range n {
		assert.Equal(t, []int32{3, 5}, ints[r], "rank %d", r)
	}
	checkGroup(t, gs)
}

// A rank that leaves in the middle of a hierarchical AllReduce, AllGather,
// Broadcast or AllToAll breaks it on every rank that needs it, on its host and
// across, with an error naming a rank; nothing waits for it.
func TestHierarchicalRankCloses(t *testing.T) {
	const n, gone = 4, 3
	ops := map[string]func(ctx context.Context, g *Group) error{
		"AllReduce": func(ctx context.Context, g *Group) error {
			buf := make([]float64, 1<<16)
			return AllReduce(ctx, g, buf, buf, Sum)
		},
		"AllGather": func(ctx context.Context, g *Group) error {
			return g.AllGather(ctx, make([]byte, 1<<17), make([]byte, n<<17))
		},
		"Broadcast": func(ctx context.Context, g *Group) error { return g.Broadcast(ctx, 0, make([]byte, 1<<19)) },
		"AllToAll": func(ctx context.Context, g *Group) error {
			return g.AllToAll(ctx, make([]byte, n<<17), make([]byte, n<<17))
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%2) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			time.AfterFunc(50*time.Millisecond, func() { gs[gone].Close() })
			errs := runAll(gs[:gone], func(g *Group) error { return op(ctx, g) })
			for r, err := range errs {
				if name == "Broadcast" && r%2 == 0 && err == nil {
					continue // the root and its host's rank need nothing of rank 3
				}
				var re *RankError
				require.ErrorAs(t, err, &re, "rank %d", r)
				require.NotErrorIs(t, err, context.DeadlineExceeded, "rank %d waited for ctx", r)
			}
			requireRank(t, errs[1], gone, "rank 1 shares a host with rank %d", gone)
		})
	}
}

// The hierarchical AllReduce allocates nothing per operation.
func TestHierarchicalAllReduceDoesNotAllocate(t *testing.T) {
	const n = 4
	gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r/2) })
	d := newDriver(gs)
	defer d.stop()
	ctx := context.Background()
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, 300_000)
	}
	for _, count := range []int{1, 300_000} {
		op := func(g *Group) error { b := bufs[g.Rank()][:count]; return AllReduce(ctx, g, b, b, Sum) }
		require.NoError(t, d.run(op))
		allocs := testing.AllocsPerRun(5, func() {
			if err := d.run(op); err != nil {
				t.Error(err)
			}
		})
		require.Zero(t, allocs, "%d elements: %v allocations per run (all %d ranks)", count, allocs, n)
	}
	// The AllGather across hosts too (the counterparts' ring and the host
	// step).
	recvs := make([][]byte, n)
	for r := range recvs {
		recvs[r] = make([]byte, n*shmSingleMin)
	}
	gather := func(g *Group) error {
		b := bytesOf(bufs[g.Rank()])[:shmSingleMin]
		return g.AllGather(ctx, b, recvs[g.Rank()])
	}
	require.NoError(t, d.run(gather))
	allocs := testing.AllocsPerRun(5, func() {
		if err := d.run(gather); err != nil {
			t.Error(err)
		}
	})
	require.Zero(t, allocs, "AllGather: %v allocations per run (all %d ranks)", allocs, n)
	bcast := func(g *Group) error { return g.Broadcast(ctx, 1, recvs[g.Rank()]) }
	require.NoError(t, d.run(bcast))
	allocs = testing.AllocsPerRun(5, func() {
		if err := d.run(bcast); err != nil {
			t.Error(err)
		}
	})
	require.Zero(t, allocs, "Broadcast: %v allocations per run (all %d ranks)", allocs, n)
	sends := make([][]byte, n)
	for r := range sends {
		sends[r] = make([]byte, n*shmSingleMin)
	}
	a2a := func(g *Group) error { return g.AllToAll(ctx, sends[g.Rank()], recvs[g.Rank()]) }
	require.NoError(t, d.run(a2a))
	allocs = testing.AllocsPerRun(5, func() {
		if err := d.run(a2a); err != nil {
			t.Error(err)
		}
	})
	require.Zero(t, allocs, "AllToAll: %v allocations per run (all %d ranks)", allocs, n)
}

// A large split AllReduce goes in pieces whose stages overlap
// (hier_pipe.go): two host steps a piece, and the same bits on every rank
// as in one piece, for piece counts that divide the elements unevenly and
// in place or not.
func TestHierarchicalAllReduceInPieces(t *testing.T) {
	const n, count = 4, 700_001 // 5.6 MB of float64: 2 pieces by size
	gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%2) })
	if !gs[0].hier.split {
		t.Skip("ranks cannot read each other's memory here (process_vm_readv): no split AllReduce")
	}
	require.Equal(t, 2, splitPiecesFor(count*8, 0))
	ctx := testCtx(t)
	in := make([][]float64, n)
	for r := range in {
		in[r] = make([]float64, count)
		for i := range in[r] {
			in[r][i] = float64(splitmix64(uint64(r*count+i))%1e6) / 7
		}
	}
	want := make([]float64, count)
	for i := range want {
		want[i] = (in[0][i] + in[2][i]) + (in[1][i] + in[3][i])
	}
	out := make([][]float64, n)
	for r := range out {
		out[r] = make([]float64, count)
	}
	for _, pieces := range []int{0, 1, 3, 7} {
		for _, inPlace := range []bool{false, true} {
			steps := make([]uint64, n)
			mustAll(t, gs, func(g *Group) error {
				g.hier.pieces = pieces
				steps[g.Rank()] = g.hier.team.step
				send, recv := in[g.Rank()], out[g.Rank()]
				if inPlace {
					copy(recv, send)
					send = recv
				}
				return AllReduce(ctx, g, send, recv, Sum)
			})
			wantPieces := splitPiecesFor(count*8, pieces)
			for r := range n {
				require.Equal(t, uint64(2*wantPieces), gs[r].hier.team.step-steps[r],
					"pieces %d: rank %d's host steps", pieces, r)
				for i := range want {
					if math.Float64bits(out[r][i]) != math.Float64bits(want[i]) {
						t.Fatalf("pieces %d, in place %v: rank %d element %d is %v, want %v",
							pieces, inPlace, r, i, out[r][i], want[i])
					}
				}
			}
		}
	}
	checkGroup(t, gs)
}

// AllGather across hosts: every rank gets every block, right, on 2 hosts
// and on 3 (the ranks of a host interleaved with the others'), with blocks
// small enough for the group's ring and large enough for the counterparts'
// ring and the host's single copy, which then run (two host steps' worth
// of reads: one).
func TestHierarchicalAllGather(t *testing.T) {
	for _, hosts := range []int{2, 3} {
		n := 2 * hosts
		gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%hosts) })
		for _, blk := range []int{1000, shmSingleMin + 8} {
			recvs := make([][]byte, n)
			steps := make([]uint64, n)
			mustAll(t, gs, func(g *Group) error {
				send := make([]byte, blk)
				for i := range send {
					send[i] = byte(splitmix64(uint64(g.Rank()*blk + i)))
				}
				recvs[g.Rank()] = make([]byte, n*blk)
				steps[g.Rank()] = g.hier.team.step
				return g.AllGather(testCtx(t), send, recvs[g.Rank()])
			})
			checkBlocks(t, gs, recvs, steps, hosts, blk, func(q, _, i int) byte { return byte(splitmix64(uint64(q*blk + i))) })
		}
		checkGroup(t, gs)
	}
}

// Broadcast across hosts: from every root, on 2 hosts and on 3, every rank
// gets the root's bytes, small (the group's algorithms) and large (the
// parts crossing side by side: two host steps on the root's host, one on
// the others).
func TestHierarchicalBroadcast(t *testing.T) {
	for _, hosts := range []int{2, 3} {
		n := 2 * hosts
		gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%hosts) })
		for _, size := range []int{1000, 2*shmSingleMin + 3} {
			for root := range n {
				bufs := make([][]byte, n)
				steps := make([]uint64, n)
				mustAll(t, gs, func(g *Group) error {
					bufs[g.Rank()] = make([]byte, size)
					if g.Rank() == root {
						for i := range bufs[root] {
							bufs[root][i] = byte(splitmix64(uint64(root*size + i)))
						}
					}
					steps[g.Rank()] = g.hier.team.step
					return g.Broadcast(testCtx(t), root, bufs[g.Rank()])
				})
				for r := range n {
					for i := range size {
						if want := byte(splitmix64(uint64(root*size + i))); bufs[r][i] != want {
							t.Fatalf("%d hosts, %d B from rank %d: rank %d has %#x at byte %d, want %#x",
								hosts, size, root, r, bufs[r][i], i, want)
						}
					}
					hostSteps := uint64(0)
					if size >= 2*shmSingleMin && gs[r].hier.split {
						hostSteps = 1
						if r%hosts == root%hosts {
							hostSteps = 2
						}
					}
					assert.Equal(t, hostSteps, gs[r].hier.team.step-steps[r], "%d hosts, %d B from rank %d: rank %d's host steps", hosts, size, root, r)
				}
			}
		}
		checkGroup(t, gs)
	}
}

// AllToAll across hosts: on 2 hosts and on 3, every rank gets block r of
// every rank's send, small (the group's algorithms) and large (the host's
// blocks in one single-copy step, the others' over the links).
func TestHierarchicalAllToAll(t *testing.T) {
	for _, hosts := range []int{2, 3} {
		n := 2 * hosts
		gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%hosts) })
		for _, blk := range []int{1000, shmSingleMin + 8} {
			recvs := make([][]byte, n)
			steps := make([]uint64, n)
			val := func(from, to, i int) byte { return byte(splitmix64(uint64((from*n+to)*blk + i))) }
			mustAll(t, gs, func(g *Group) error {
				send := make([]byte, n*blk)
				for to := range n {
					for i := range blk {
						send[to*blk+i] = val(g.Rank(), to, i)
					}
				}
				recvs[g.Rank()] = make([]byte, n*blk)
				steps[g.Rank()] = g.hier.team.step
				return g.AllToAll(testCtx(t), send, recvs[g.Rank()])
			})
			checkBlocks(t, gs, recvs, steps, hosts, blk, val)
		}
		checkGroup(t, gs)
	}
}

// The ranks of all hosts on this machine's kernel count for a team's
// waits: two "hosts" of 2 ranks each on one machine are 4 ranks on its
// CPUs, which spin briefly where there are fewer than 4 CPUs.
func TestHierarchicalTeamCountsTheKernelsRanks(t *testing.T) {
	const n = 4
	gs := newHierGroups(t, n, func(r int) byte { return byte(1 + r%2) })
	wantSpin, wantSpreads := cpuPolicy(n)
	for r, g := range gs {
		require.Equal(t, 2, g.hier.team.n, "rank %d", r)
		assert.Equal(t, wantSpreads, g.hier.team.spreads, "rank %d", r)
		assert.Equal(t, wantSpin, g.hier.team.spin, "rank %d", r)
	}
}

func TestCPUPolicy(t *testing.T) {
	cpus := runtime.NumCPU()
	spin, spreads := cpuPolicy(cpus)
	assert.True(t, spreads)
	assert.Equal(t, int64(shmSpinAlone), spin)
	spin, spreads = cpuPolicy(cpus + 1)
	assert.False(t, spreads)
	assert.Equal(t, int64(shmSpinShared), spin)
	t.Setenv("RDMA_COLL_SPIN", "5us")
	spin, spreads = cpuPolicy(cpus)
	assert.True(t, spreads)
	assert.Equal(t, int64(5*time.Microsecond), spin)
}

// checkBlocks checks that every rank r's recvs[r] holds, as block q, the
// bytes want(q, r, i), and that a run with blocks of blk bytes took one
// host step (the single copy) where they are large enough to split, none
// else; steps are the ranks' host steps before the run.
func checkBlocks(t *testing.T, gs []*Group, recvs [][]byte, steps []uint64, hosts, blk int, want func(q, r, i int) byte) {
	n := len(gs)
	for r := range n {
		for q := range n {
			for i := range blk {
				if w := want(q, r, i); recvs[r][q*blk+i] != w {
					t.Fatalf("%d hosts, block %d B: rank %d has %#x at byte %d of rank %d's block, want %#x",
						hosts, blk, r, recvs[r][q*blk+i], i, q, w)
				}
			}
		}
		hostSteps := uint64(0)
		if blk >= shmSingleMin && gs[r].hier.split {
			hostSteps = 1
		}
		assert.Equal(t, hostSteps, gs[r].hier.team.step-steps[r], "%d hosts, block %d B: rank %d's host steps", hosts, blk, r)
	}
}
