package collectives

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// eagerGroups is n ranks on the segment whose Broadcasts are eager
// (shm_eager.go) whatever the host's CPUs.
func eagerGroups(t *testing.T, n int) []*Group {
	gs := newEngineGroups(t, n, "shm")
	for _, g := range gs {
		g.shm.eager = true
	}
	return gs
}

// An eager Broadcast's root returns before any receiver has called, its
// buffer the caller's again at once; the receivers still get what it held
// then, whichever path the group copies large operations on (single copy
// or the segment), and the group goes on.
func TestEagerBroadcastRootReturnsFirst(t *testing.T) {
	const n = 3
	gs := eagerGroups(t, n)
	ctx := testCtx(t)
	for _, single := range []bool{false, gs[0].shm.single} {
		for _, g := range gs {
			g.shm.single = single
		}
		for _, size := range []int{shmEagerMin, shmChunk + 5, shmEagerMax} {
			want := pattern(size, keyOf(47, size))
			bufs := [n][]byte{make([]byte, size), append([]byte(nil), want...), make([]byte, size)}
			// The root alone: no receiver calls before it returned.
			rootCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := gs[1].Broadcast(rootCtx, 1, bufs[1])
			cancel()
			require.NoError(t, err, "size %d (single copy %v): the root waited for the receivers", size, single)
			clear(bufs[1])
			mustAll(t, []*Group{gs[0], gs[2]}, func(g *Group) error { return g.Broadcast(ctx, 1, bufs[g.Rank()]) })
			require.Equal(t, want, bufs[0], "size %d", size)
			require.Equal(t, want, bufs[2], "size %d", size)
			mustAll(t, gs, func(g *Group) error { return g.Barrier(ctx) })
		}
	}
	// Back to back, and each operation after: the root's next step checks
	// the receivers' posts and frees its buffers.
	for i := range 5 {
		size := shmEagerMin + i*40_000
		mustAll(t, gs, func(g *Group) error {
			buf := pattern(size, keyOf(g.Rank(), i))
			if err := g.Broadcast(ctx, i%n, buf); err != nil {
				return err
			}
			require.Equal(t, pattern(size, keyOf(i%n, i)), buf, "rank %d, broadcast %d", g.Rank(), i)
			return g.AllGather(ctx, buf[:8], make([]byte, 8*n))
		})
	}
}

// Ranks that disagree about an eager Broadcast still fail: a receiver in
// the call, as before; a root, whose call returned before it could know,
// in its next operation, with the error naming the rank that disagreed.
func TestEagerBroadcastMismatch(t *testing.T) {
	const n = 3
	t.Run("root", func(t *testing.T) {
		gs := eagerGroups(t, n)
		ctx := testCtx(t)
		errs := runAll(gs, func(g *Group) error {
			root := 0
			if g.Rank() == 2 {
				root = 2
			}
			return g.Broadcast(ctx, root, make([]byte, shmChunk))
		})
		require.NoError(t, errs[0], "rank 0 (a root) returns before it checks")
		require.NoError(t, errs[2], "rank 2 (a root) returns before it checks")
		errs = runAll(gs, func(g *Group) error { return g.Barrier(ctx) })
		requireRank(t, errs[0], 2)
		requireRank(t, errs[2], 0)
		require.Error(t, errs[1])
		require.Contains(t, errs[0].Error(), "Broadcast")
	})
	t.Run("length", func(t *testing.T) {
		gs := eagerGroups(t, n)
		ctx := testCtx(t)
		errs := runAll(gs, func(g *Group) error {
			size := shmChunk
			if g.Rank() == 1 {
				size += 8
			}
			return g.Broadcast(ctx, 0, make([]byte, size))
		})
		requireRank(t, errs[1], 0)
		require.NoError(t, errs[0], "the root returns before it checks")
		errs = runAll(gs, func(g *Group) error { return g.Barrier(ctx) })
		requireRank(t, errs[0], 1)
	})
}

// A receiver that leaves the group instead of reading an eager Broadcast
// breaks the root's next operation, naming it; one that never calls keeps
// that operation waiting only until its ctx ends.
func TestEagerBroadcastReceiverGone(t *testing.T) {
	const n = 3
	gs := eagerGroups(t, n)
	ctx := testCtx(t)
	buf := make([]byte, shmChunk)
	require.NoError(t, gs[0].Broadcast(ctx, 0, buf))
	require.NoError(t, gs[1].Broadcast(ctx, 0, make([]byte, shmChunk)))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := gs[0].Barrier(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "rank 2 never called")

	gs = eagerGroups(t, n)
	require.NoError(t, gs[0].Broadcast(ctx, 0, buf))
	require.NoError(t, gs[1].Broadcast(ctx, 0, make([]byte, shmChunk)))
	require.NoError(t, gs[2].Close())
	requireRank(t, gs[0].Barrier(ctx), 2)
}

// An eager Broadcast allocates nothing, root or receiver.
func TestEagerBroadcastDoesNotAllocate(t *testing.T) {
	const n = 3
	gs := eagerGroups(t, n)
	d := newDriver(gs)
	defer d.stop()
	ctx := testCtx(t)
	in := make([][]byte, n)
	for r := range n {
		in[r] = make([]byte, shmEagerMax)
	}
	requireNoAllocs(t, d, map[string]func(g *Group) error{
		"Broadcast eager": func(g *Group) error { return g.Broadcast(ctx, 1, in[g.Rank()]) },
	}, n)
}

// A rank that the host wakes late from a barrier (it posted the barrier's
// step, the others returned, it has yet to run again) does not hold up an
// eager Broadcast's root after the barrier: the barrier wrote nothing into
// the buffers, so the root's next steps wait only for the steps before it.
func TestEagerBroadcastAfterLateBarrier(t *testing.T) {
	const n = 3
	gs := eagerGroups(t, n)
	ctx := testCtx(t)
	// Rank 2's barrier, stopped where a rank sleeps until it is woken.
	g2, t2 := gs[2], gs[2].shm
	require.NoError(t, g2.begin(ctx, kindBarrier, 0, 0))
	t2.expect(0)
	t2.readsOnly = true
	op := opWord(g2.cur)
	k, _, err := t2.begin(g2)
	require.NoError(t, err)
	t2.post(k, op, 0)
	mustAll(t, gs[:2], func(g *Group) error { return g.Barrier(ctx) })

	size := shmEagerMax
	want := pattern(size, keyOf(53, size))
	root, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = gs[0].Broadcast(root, 0, append([]byte(nil), want...))
	cancel()
	require.NoError(t, err, "the root waited for rank 2 to leave the barrier")

	require.NoError(t, g2.end(func() error {
		if err := t2.waitAll(g2, k, op, 0); err != nil {
			return err
		}
		t2.done(k)
		return nil
	}()))
	bufs := [n][]byte{nil, make([]byte, size), make([]byte, size)}
	mustAll(t, gs[1:], func(g *Group) error { return g.Broadcast(ctx, 0, bufs[g.Rank()]) })
	require.Equal(t, want, bufs[1])
	require.Equal(t, want, bufs[2])
	mustAll(t, gs, func(g *Group) error { return g.Barrier(ctx) })
}
