//go:build linux

package collectives

import (
	"bytes"
	"context"
	"math"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// needSingleCopy skips t where this host refuses process_vm_readv (a
// container's seccomp profile without CAP_SYS_PTRACE does): groups there
// run on two copies, which the other tests cover.
func needSingleCopy(t testing.TB) {
	t.Helper()
	var b [8]byte
	if err := readPeer(os.Getpid(), b[:1], uint64(uintptr(unsafe.Pointer(&b[1])))); err != nil {
		t.Skipf("process_vm_readv is refused on this host: %v", err)
	}
}

// The ranks of one process can read each other's memory, so a test group
// copies once for large operations (AllReduce too where there is a CPU
// per rank); with RDMA_COLL_SINGLE=0 on a rank it does not, on every rank.
func TestSingleCopyAgreed(t *testing.T) {
	needSingleCopy(t)
	gs := newEngineGroups(t, 3, "shm")
	for _, g := range gs {
		require.True(t, g.shm.single, "rank %d", g.Rank())
		require.Equal(t, 3 <= runtime.NumCPU(), g.shm.singleReduce, "rank %d", g.Rank())
	}
	t.Setenv(singleCopyEnv, "0")
	gs = newEngineGroups(t, 3, "shm")
	for _, g := range gs {
		require.False(t, g.shm.single, "rank %d", g.Rank())
		require.False(t, g.shm.singleReduce, "rank %d", g.Rank())
	}
}

// Results by single copy, at sizes that are not multiples of the pieces:
// Broadcast, AllGather and AllToAll exact, AllReduce of floats whose sums
// depend on the order bitwise equal to the serial sum in rank order (each
// block is computed once, in rank order), in place and not.
func TestSingleCopyResults(t *testing.T) {
	needSingleCopy(t)
	for _, n := range []int{2, 3} {
		t.Run(name("n=", n), func(t *testing.T) {
			gs := newEngineGroups(t, n, "shm")
			require.True(t, gs[0].shm.single)
			for _, g := range gs {
				// As if each rank had a CPU: AllReduce copies once too.
				g.shm.singleReduce = true
			}
			ctx := testCtx(t)
			blk := shmSingleMin + 4*shmChunk/3 + 3

			want := pattern(n*blk, keyOf(21, n))
			bc := make([][]byte, n)
			mustAll(t, gs, func(g *Group) error {
				bc[g.Rank()] = make([]byte, n*blk)
				if g.Rank() == 1 {
					copy(bc[1], want)
				}
				return g.Broadcast(ctx, 1, bc[g.Rank()])
			})
			for r := range bc {
				require.True(t, bytes.Equal(want, bc[r]), "broadcast rank %d", r)
			}

			sends := make([][]byte, n)
			for r := range sends {
				sends[r] = pattern(n*blk, keyOf(22, r))
			}
			ag, a2a := make([][]byte, n), make([][]byte, n)
			mustAll(t, gs, func(g *Group) error {
				r := g.Rank()
				ag[r], a2a[r] = make([]byte, n*blk), make([]byte, n*blk)
				if err := g.AllGather(ctx, sends[r][:blk], ag[r]); err != nil {
					return err
				}
				return g.AllToAll(ctx, sends[r], a2a[r])
			})
			for r := range n {
				for j := range n {
					require.True(t, bytes.Equal(sends[j][:blk], ag[r][j*blk:(j+1)*blk]), "allgather rank %d block %d", r, j)
					require.True(t, bytes.Equal(sends[j][r*blk:(r+1)*blk], a2a[r][j*blk:(j+1)*blk]), "alltoall rank %d from %d", r, j)
				}
			}

			count := n*blk/8 + 1
			in := make([][]float64, n)
			for r := range in {
				in[r] = make([]float64, count)
				for i := range in[r] {
					in[r][i] = float64(splitmix64(keyOf(23, r, i))>>11) * 0x1p-53 * math.Pow(10, float64(i%7))
				}
			}
			wantF := serialReduce(in, Sum)
			for _, inPlace := range []bool{false, true} {
				out := make([][]float64, n)
				mustAll(t, gs, func(g *Group) error {
					r := g.Rank()
					send := append([]float64(nil), in[r]...)
					out[r] = send
					if !inPlace {
						out[r] = make([]float64, count)
					}
					return AllReduce(ctx, g, send, out[r], Sum)
				})
				for r := range out {
					require.Equal(t, wantF, out[r], "allreduce rank %d in place %v", r, inPlace)
				}
			}
		})
	}
}

// Single-copy operations allocate nothing either.
func TestSingleCopyDoesNotAllocate(t *testing.T) {
	needSingleCopy(t)
	const n = 2
	gs := newEngineGroups(t, n, "shm")
	for _, g := range gs {
		g.shm.singleReduce = true
	}
	d := newDriver(gs)
	defer d.stop()
	ctx := testCtx(t)
	size := 4 * shmSingleMin
	f32 := make([][]float32, n)
	in, out := make([][]byte, n), make([][]byte, n)
	for r := range n {
		f32[r] = make([]float32, size)
		in[r], out[r] = make([]byte, n*size), make([]byte, n*size)
	}
	ops := map[string]func(g *Group) error{
		"AllReduce": func(g *Group) error { b := f32[g.Rank()]; return AllReduce(ctx, g, b, b, Sum) },
		"Broadcast": func(g *Group) error { return g.Broadcast(ctx, 1, in[g.Rank()]) },
		"AllGather": func(g *Group) error { return g.AllGather(ctx, in[g.Rank()][:size], out[g.Rank()]) },
		"AllToAll":  func(g *Group) error { return g.AllToAll(ctx, in[g.Rank()], out[g.Rank()]) },
	}
	requireNoAllocs(t, d, ops, n)
}

// A peer that posts an address its process has not mapped breaks the
// group with an error naming it; nothing waits on it. Rank 1 is played
// by the test, which writes its step into the segment as a hostile
// process could.
func TestSingleCopyBadAddress(t *testing.T) {
	needSingleCopy(t)
	gs := newEngineGroups(t, 2, "shm")
	buf := make([]byte, 2*shmSingleMin)
	err := postAsRank1(t, gs[0], func() error { return gs[0].Broadcast(testCtx(t), 1, buf) }, 1<<62, 0) // nothing is mapped there
	requireRank(t, err, 1)
	require.Contains(t, err.Error(), "reading its buffer")
	require.ErrorIs(t, gs[0].Barrier(testCtx(t)), ErrBroken)
}

// postAsRank1 runs op on g, rank 0 of a single-copy group of two, and
// posts rank 1's side of the step op takes, with the same descriptor and
// the addresses given, as a hostile rank 1 could; it returns op's error.
func postAsRank1(t *testing.T, g *Group, op func() error, readAddr, writeAddr uint64) error {
	t0, c1 := g.shm, g.shm.ctrl[1]
	k := t0.ctrl[0].posted.Load() + 1
	errc := make(chan error, 1)
	go func() { errc <- op() }()
	mine := &t0.ctrl[0].desc[k%shmDescs]
	for t0.ctrl[0].posted.Load() < k {
		time.Sleep(time.Millisecond)
	}
	d := &c1.desc[k%shmDescs]
	d[1].Store(mine[1].Load())
	d[2].Store(mine[2].Load())
	d[3].Store(readAddr)
	d[4].Store(writeAddr)
	d[0].Store(k)
	c1.posted.Store(k)
	select {
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		t.Fatal("rank 0 still waits")
		return nil
	}
}

// A group of one rank, set up as Join does, runs every operation (it
// shares nothing: a team of one has no second buffer to reduce with).
func TestOneRankGroup(t *testing.T) {
	g, err := NewGroup(0, make([]net.Conn, 1))
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, attachShm(testCtx(t), g, make([]net.Conn, 1), "auto"))
	for _, count := range []int{1 << 10, 1 << 17} {
		b := make([]float32, count)
		b[count-1] = 3
		require.NoError(t, AllReduce(testCtx(t), g, b, b, Sum))
		require.Equal(t, float32(3), b[count-1])
		require.NoError(t, Reduce(testCtx(t), g, 0, b, b, Max))
		require.NoError(t, g.Broadcast(testCtx(t), 0, make([]byte, 4*count)))
		require.NoError(t, g.AllGather(testCtx(t), make([]byte, count), make([]byte, count)))
		require.NoError(t, g.AllToAll(testCtx(t), make([]byte, count), make([]byte, count)))
	}
	require.NoError(t, g.Barrier(testCtx(t)))
}

// A single-copy AllReduce is one step: each rank writes the pieces of
// its block into the others' results as it computes them, rather than
// taking a second step to read the others' blocks, so the ranks meet
// once an operation whatever its size.
func TestSingleCopyAllReduceIsOneStep(t *testing.T) {
	needSingleCopy(t)
	for _, n := range []int{2, 3} {
		t.Run(name("n=", n), func(t *testing.T) {
			gs := newEngineGroups(t, n, "shm")
			for _, g := range gs {
				g.shm.singleReduce = true
			}
			ctx := testCtx(t)
			count := n * shmSingleMin / 4 * 3
			bufs := make([][]float32, n)
			for r := range bufs {
				bufs[r] = make([]float32, count)
				for i := range bufs[r] {
					bufs[r][i] = float32(r + 1 + i%5)
				}
			}
			before := gs[0].shm.step
			mustAll(t, gs, func(g *Group) error {
				b := bufs[g.Rank()]
				return AllReduce(ctx, g, b, b, Sum)
			})
			require.Equal(t, uint64(1), gs[0].shm.step-before, "steps of one AllReduce")
			for r := range bufs {
				for i, v := range bufs[r] {
					if want := float32(n*(n+1)/2 + n*(i%5)); v != want {
						t.Fatalf("rank %d element %d: %v, want %v", r, i, v, want)
					}
				}
			}
		})
	}
}

// A peer that posts, for a single-copy AllReduce, an address to write
// into that its process has not mapped breaks the group with an error
// naming it, as a bad address to read from does.
func TestSingleCopyBadWriteAddress(t *testing.T) {
	needSingleCopy(t)
	gs := newEngineGroups(t, 2, "shm")
	gs[0].shm.singleReduce = true
	buf, peerSend := make([]float32, shmSingleMin), make([]float32, shmSingleMin)
	err := postAsRank1(t, gs[0], func() error { return AllReduce(testCtx(t), gs[0], buf, buf, Sum) },
		uint64(uintptr(unsafe.Pointer(unsafe.SliceData(peerSend)))), 1<<62)
	runtime.KeepAlive(peerSend)
	requireRank(t, err, 1)
	require.Contains(t, err.Error(), "writing its buffer")
	require.ErrorIs(t, gs[0].Barrier(testCtx(t)), ErrBroken)
}

// Where every rank has a CPU, a single-copy Broadcast's root writes a
// share of the buffer into each receiver's, at the address the receiver
// posted: a receiver that posts one its process has not mapped breaks the
// group with an error naming it, and the root returns at once.
func TestSingleCopyBroadcastRootShares(t *testing.T) {
	needSingleCopy(t)
	gs := newEngineGroups(t, 2, "shm")
	gs[0].shm.singleReduce = true
	buf := make([]byte, 2*shmSingleMin)
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	err := postAsRank1(t, gs[0], func() error { return gs[0].Broadcast(ctx, 0, buf) }, 0, 1<<62)
	requireRank(t, err, 1)
	require.Contains(t, err.Error(), "writing its buffer")
	require.ErrorIs(t, gs[0].Barrier(testCtx(t)), ErrBroken)
}

// With more ranks than CPUs (the root does not share the copying), a
// Broadcast's receiver waits for the root alone, through the segment
// (one step) as by single copy: it returns with the data while
// another receiver has not even called yet, and the root returns once
// that one has read too.
func TestBroadcastReceiversDoNotWait(t *testing.T) {
	needSingleCopy(t)
	const n = 3
	gs := newEngineGroups(t, n, "shm")
	for _, g := range gs {
		g.shm.singleReduce, g.shm.eager = false, false // not shm_eager.go's root
	}
	ctx := testCtx(t)
	for _, size := range []int{1000, 2*shmSingleMin + 5} {
		for _, g := range gs {
			g.shm.single = size > shmChunk
		}
		want := pattern(size, keyOf(31, size))
		bufs := [n][]byte{append([]byte(nil), want...), make([]byte, size), make([]byte, size)}
		rootErr := make(chan error, 1)
		go func() { rootErr <- gs[0].Broadcast(ctx, 0, bufs[0]) }()
		require.NoError(t, gs[1].Broadcast(ctx, 0, bufs[1]), "size %d: rank 1, rank 2 not called yet", size)
		require.Equal(t, want, bufs[1])
		select {
		case err := <-rootErr:
			t.Fatalf("size %d: the root returned (%v) before rank 2 read", size, err)
		case <-time.After(20 * time.Millisecond):
		}
		require.NoError(t, gs[2].Broadcast(ctx, 0, bufs[2]))
		require.NoError(t, <-rootErr)
		require.Equal(t, want, bufs[2])
		mustAll(t, gs, func(g *Group) error { return g.Barrier(ctx) })
	}
}

// Ranks that disagree on a single-copy Broadcast's root fail, though a
// receiver no longer checks the others' descriptors: the root checks each
// receiver's before it is done with the step, and the group breaks.
func TestSingleCopyBroadcastMismatchedRoot(t *testing.T) {
	needSingleCopy(t)
	const n = 3
	gs := newEngineGroups(t, n, "shm")
	for _, g := range gs {
		g.shm.singleReduce, g.shm.eager = false, false // not shm_eager.go's root
	}
	ctx := testCtx(t)
	size := 2 * shmSingleMin
	errs := runAll(gs, func(g *Group) error {
		root := 0
		if g.Rank() == 2 {
			root = 2
		}
		return g.Broadcast(ctx, root, make([]byte, size))
	})
	// Rank 0 names rank 2, as the rank that disagreed (rank 0 saw it
	// first) or as the one that reported it (rank 2 did, blaming rank 0).
	requireRankOrReporter(t, errs[0], 2)
	require.Error(t, errs[2])
	for r, g := range gs {
		require.Error(t, g.Barrier(ctx), "rank %d", r)
	}
}
