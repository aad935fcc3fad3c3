package collectives

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireRank checks err is a *RankError naming rank.
func requireRank(t *testing.T, err error, rank int, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var re *RankError
	require.True(t, errors.As(err, &re), "error %q names no rank", err)
	require.Equal(t, rank, re.Rank, "error %q", err)
	require.Contains(t, err.Error(), "rank "+itoa(rank))
}

// requireRankOrReporter checks err is a *RankError naming rank, or one
// that rank reported: ranks that disagree each blame the other, and which
// of them sees it first, and reports it to the rest, is the scheduler's.
func requireRankOrReporter(t *testing.T, err error, rank int) {
	t.Helper()
	var re *RankError
	require.True(t, errors.As(err, &re), "error %q names no rank", err)
	if re.Rank == rank {
		requireRank(t, err, rank)
		return
	}
	require.Equal(t, "failed", re.Op, "error %q", err)
	require.Contains(t, err.Error(), "reported by rank "+itoa(rank))
}

func itoa(i int) string { return name(i) }

func TestContextCancelUnblocks(t *testing.T) {
	for _, m := range []struct {
		name string
		mesh mesh
	}{{"pipe", pipeMesh}, {"tcp", tcpMesh}, {"shm", nil}} {
		t.Run(m.name, func(t *testing.T) {
			var gs []*Group
			if m.mesh == nil {
				gs = newEngineGroups(t, 3, "shm")
			} else {
				gs = newGroups(t, 3, m.mesh)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			// Rank 2 does not take part, so ranks 0 and 1 block until ctx ends.
			errs := runAll(gs[:2], func(g *Group) error {
				buf := make([]float64, 1<<16)
				return AllReduce(ctx, g, buf, buf, Sum)
			})
			// Each cancelled rank fails with its own cancellation, unless the
			// other one's abort frame reached it first.
			for r, err := range errs {
				if !errors.Is(err, context.Canceled) {
					requireRank(t, err, 1-r, "rank %d", r)
					require.Contains(t, err.Error(), "context canceled")
				}
			}
			// The cancelled ranks told rank 2, and named themselves.
			err := gs[2].Barrier(context.Background())
			require.Error(t, err)
			var re *RankError
			require.ErrorAs(t, err, &re)
			assert.Contains(t, []int{0, 1}, re.Rank)
			// Every group is broken for good, and says so.
			for r, g := range gs {
				require.Error(t, g.Err(), "rank %d", r)
				err := g.Barrier(context.Background())
				require.ErrorIs(t, err, ErrBroken, "rank %d", r)
			}
		})
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	forEngines(t, 2, func(t *testing.T, gs []*Group) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, gs[0].Barrier(ctx), context.Canceled)
		// Rank 1 would wait for rank 0 forever; it is told instead.
		requireRank(t, gs[1].Barrier(context.Background()), 0)
	})
}

// A rank whose conns die in the middle of an operation makes every other
// rank fail with an error naming it, whichever link each was waiting on.
func TestRankDiesMidOperation(t *testing.T) {
	for _, n := range []int{2, 4, 7} {
		t.Run(name("n=", n), func(t *testing.T) {
			conns := tcpMesh(t, n)
			gs := make([]*Group, n-1)
			for i := range gs {
				g, err := NewGroup(i, conns[i])
				require.NoError(t, err)
				gs[i] = g
				defer g.Close()
			}
			dead := n - 1
			// The dead rank reads a little of what it is sent, then its
			// process "dies": its conns close.
			go func() {
				time.Sleep(20 * time.Millisecond)
				for _, c := range conns[dead] {
					if c != nil {
						c.Close()
					}
				}
			}()
			errs := runAll(gs, func(g *Group) error {
				buf := make([]float32, 1<<18)
				for i := 0; i < 100; i++ {
					if err := AllReduce(testCtx(t), g, buf, buf, Sum); err != nil {
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				requireRank(t, err, dead, "rank %d", r)
				requireRank(t, gs[r].Barrier(context.Background()), dead)
				require.ErrorIs(t, gs[r].Barrier(context.Background()), ErrBroken)
			}
		})
	}
}

func TestCloseDuringOperation(t *testing.T) {
	forEngines(t, 3, func(t *testing.T, gs []*Group) {
		time.AfterFunc(30*time.Millisecond, func() { gs[2].Close() })
		errs := runAll(gs[:2], func(g *Group) error { return g.Barrier(testCtx(t)) })
		for r, err := range errs {
			requireRank(t, err, 2, "rank %d", r)
		}
		require.ErrorIs(t, gs[2].Barrier(context.Background()), ErrClosed)
		require.ErrorIs(t, gs[2].Close(), nil)
	})
}

func TestMismatchedOperations(t *testing.T) {
	forEngines(t, 2, func(t *testing.T, gs []*Group) {
		errs := runAll(gs, func(g *Group) error {
			if g.Rank() == 0 {
				return g.Broadcast(testCtx(t), 0, make([]byte, 10))
			}
			return g.AllToAll(testCtx(t), make([]byte, 10), make([]byte, 10))
		})
		for _, err := range errs {
			require.Error(t, err)
		}
		// Rank 1 read rank 0's Broadcast frame while in AllToAll.
		requireRank(t, errs[1], 0)
		require.Contains(t, errs[1].Error(), "Broadcast")
		require.Contains(t, errs[1].Error(), "AllToAll")
	})
}

func TestMismatchedLengths(t *testing.T) {
	forEngines(t, 3, func(t *testing.T, gs []*Group) {
		errs := runAll(gs, func(g *Group) error {
			buf := make([]int32, 10+g.Rank())
			return AllReduce(testCtx(t), g, buf, buf, Max)
		})
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
		}
	})
}

func TestMismatchedTypes(t *testing.T) {
	forEngines(t, 2, func(t *testing.T, gs []*Group) {
		errs := runAll(gs, func(g *Group) error {
			if g.Rank() == 0 {
				b := make([]int64, 4)
				return AllReduce(testCtx(t), g, b, b, Sum)
			}
			b := make([]float64, 4)
			return AllReduce(testCtx(t), g, b, b, Sum)
		})
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
		}
	})
}

func TestMissingLink(t *testing.T) {
	conns := pipeMesh(t, 3)
	// Ranks 1 and 2 are not connected: a star around rank 0.
	conns[1][2].Close()
	conns[2][1].Close()
	conns[1][2], conns[2][1] = nil, nil
	gs := make([]*Group, 3)
	for i := range gs {
		g, err := NewGroup(i, conns[i])
		require.NoError(t, err)
		defer g.Close()
		gs[i] = g
	}
	errs := runAll(gs, func(g *Group) error {
		return g.AllGather(testCtx(t), []byte{1}, make([]byte, 3))
	})
	var sawNotConnected bool
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		if errors.Is(err, ErrNotConnected) {
			sawNotConnected = true
			require.Contains(t, err.Error(), "no conn to rank")
		}
	}
	require.True(t, sawNotConnected, "%v", errs)
}

func TestBadArguments(t *testing.T) {
	cases := map[string]func(g *Group) error{
		"bcast root":       func(g *Group) error { return g.Broadcast(context.Background(), 5, nil) },
		"negative root":    func(g *Group) error { return g.Scatter(context.Background(), -1, nil, nil) },
		"scatter lengths":  func(g *Group) error { return g.Scatter(context.Background(), 0, make([]byte, 3), make([]byte, 2)) },
		"gather lengths":   func(g *Group) error { return g.Gather(context.Background(), 0, make([]byte, 3), make([]byte, 2)) },
		"allgather length": func(g *Group) error { return g.AllGather(context.Background(), make([]byte, 3), make([]byte, 2)) },
		"alltoall lengths": func(g *Group) error { return g.AllToAll(context.Background(), make([]byte, 4), make([]byte, 2)) },
		"alltoall odd":     func(g *Group) error { return g.AllToAll(context.Background(), make([]byte, 3), make([]byte, 3)) },
		"alltoall overlap": func(g *Group) error { b := make([]byte, 4); return g.AllToAll(context.Background(), b, b) },
		"allreduce op": func(g *Group) error {
			return AllReduce(context.Background(), g, []int32{1}, []int32{1}, Op(9))
		},
		"allreduce lengths": func(g *Group) error {
			return AllReduce(context.Background(), g, []int32{1}, []int32{1, 2}, Sum)
		},
		"allreduce overlap": func(g *Group) error {
			b := make([]int32, 4)
			return AllReduce(context.Background(), g, b[:3], b[1:], Sum)
		},
		"reduce root": func(g *Group) error {
			return Reduce(context.Background(), g, 2, []int32{1}, []int32{1}, Sum)
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			forEngines(t, 2, func(t *testing.T, gs []*Group) {
				err := f(gs[0])
				require.Error(t, err)
				require.Error(t, gs[0].Err())
				// The peer learns rank 0 failed instead of waiting.
				requireRank(t, gs[1].Barrier(context.Background()), 0)
			})
		})
	}
}

func TestNewGroupErrors(t *testing.T) {
	_, err := NewGroup(0, nil)
	require.Error(t, err)
	_, err = NewGroup(2, make([]net.Conn, 2))
	require.Error(t, err)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_, err = NewGroup(0, []net.Conn{a, b})
	require.ErrorContains(t, err, "must be nil")
}

func TestConcurrentUseIsRefused(t *testing.T) {
	forEngines(t, 2, func(t *testing.T, gs []*Group) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error)
		go func() { done <- gs[0].Barrier(ctx) }()
		// Wait until the barrier is running (rank 1 never joins).
		require.Eventually(t, func() bool { return gs[0].busy.Load() }, 5*time.Second, time.Millisecond)
		require.ErrorIs(t, gs[0].Barrier(context.Background()), ErrBusy)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

// A peer that sends garbage is an error naming it, not a panic or a hang.
func TestGarbageFromPeer(t *testing.T) {
	a, b := net.Pipe()
	g, err := NewGroup(0, []net.Conn{nil, a})
	require.NoError(t, err)
	defer g.Close()
	go func() {
		_, _ = b.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		b.Close()
	}()
	requireRank(t, g.Barrier(testCtx(t)), 1)
}

// An abort frame names the rank it blames; a peer cannot blame a rank outside
// the group: such a frame is the peer's own protocol error.
func TestAbortBlamesRankInGroup(t *testing.T) {
	for _, tc := range []struct {
		blamed   uint16
		wantRank int
		wantOp   string
	}{
		{blamed: 0, wantRank: 0, wantOp: "failed"},
		{blamed: 1, wantRank: 1, wantOp: "failed"},
		{blamed: 2, wantRank: 1, wantOp: "frame"},
		{blamed: 65535, wantRank: 1, wantOp: "frame"},
	} {
		t.Run(name("blamed=", int(tc.blamed)), func(t *testing.T) {
			a, b := net.Pipe()
			g, err := NewGroup(0, []net.Conn{nil, a})
			require.NoError(t, err)
			defer g.Close()
			go func() { _, _ = io.Copy(io.Discard, b) }()
			text := []byte("boom")
			frame := make([]byte, hdrLen+len(text))
			h := header{kind: kindAbort, root: tc.blamed, len: uint32(len(text))}
			h.put(frame)
			copy(frame[hdrLen:], text)
			go func() { _, _ = b.Write(frame) }()
			err = g.Barrier(context.Background())
			var re *RankError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.wantRank, re.Rank, "error %q", err)
			assert.Equal(t, tc.wantOp, re.Op, "error %q", err)
		})
	}
}
