//go:build linux

package collectives

import (
	"context"
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma"
)

// Join gives ranks on one host the shared segment, over rdma conns and over
// TCP, unless RDMA_COLL_ALGO says otherwise; an unknown value fails Join.
func TestJoinSharesSegment(t *testing.T) {
	for _, tc := range []struct {
		algo string
		tcp  bool
		shm  bool
	}{
		{"", false, true}, {"auto", true, true}, {"shm", false, true}, {"stream", false, false}, {"stream", true, false},
	} {
		t.Run(name(tc.algo, "/tcp=", tc.tcp), func(t *testing.T) {
			t.Setenv(AlgoEnv, tc.algo)
			gs := joinAll(t, 3, func(ctx context.Context, rank int, root string) (*Group, error) {
				b := Bootstrap{TCP: tc.tcp, Config: &rdma.Config{Provider: "soft"}}
				return b.Join(ctx, rank, 3, root)
			})
			for r, g := range gs {
				assert.Equal(t, tc.shm, g.shm != nil, "rank %d", r)
			}
			checkGroup(t, gs)
		})
	}
	t.Run("unknown", func(t *testing.T) {
		t.Setenv(AlgoEnv, "ring")
		root := freeAddr(t, "127.0.0.1")
		errs := make(chan error, 2)
		for r := range 2 {
			go func() {
				g, err := (&Bootstrap{TCP: true}).Join(testCtx(t), r, 2, root)
				if err == nil {
					g.Close()
				}
				errs <- err
			}()
		}
		for range 2 {
			assert.ErrorContains(t, <-errs, AlgoEnv+`="ring"`)
		}
	})
}

// The same-host engine allocates nothing per operation either, also when
// ctx can end (its waits poll it instead of registering a callback).
func TestShmOperationsDoNotAllocate(t *testing.T) {
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), deadline} {
		t.Run(name("deadline=", ctx != context.Background()), func(t *testing.T) { checkShmAllocs(t, ctx) })
	}
}

func checkShmAllocs(t *testing.T, ctx context.Context) {
	const n = 3
	gs := newEngineGroups(t, n, "shm")
	d := newDriver(gs)
	defer d.stop()
	big := 300_000
	f32 := make([][]float32, n)
	in, out := make([][]byte, n), make([][]byte, n)
	for r := range n {
		f32[r] = make([]float32, big)
		in[r], out[r] = make([]byte, n*big), make([]byte, n*big)
	}
	ops := map[string]func(g *Group) error{
		"Barrier":   func(g *Group) error { return g.Barrier(ctx) },
		"AllReduce": func(g *Group) error { b := f32[g.Rank()]; return AllReduce(ctx, g, b, b, Sum) },
		"Reduce":    func(g *Group) error { b := f32[g.Rank()][:1000]; return Reduce(ctx, g, 1, b, b, Max) },
		"Broadcast": func(g *Group) error { return g.Broadcast(ctx, 2, in[g.Rank()]) },
		"AllGather": func(g *Group) error { return g.AllGather(ctx, in[g.Rank()][:big], out[g.Rank()]) },
		"AllToAll":  func(g *Group) error { return g.AllToAll(ctx, in[g.Rank()], out[g.Rank()]) },
		"Scatter":   func(g *Group) error { return g.Scatter(ctx, 0, in[g.Rank()], out[g.Rank()][:big]) },
		"Gather":    func(g *Group) error { return g.Gather(ctx, 1, in[g.Rank()][:big], out[g.Rank()]) },
	}
	requireNoAllocs(t, d, ops, n)
}

// What a peer leaves in its control block is bounded before use: a failure
// that blames a rank outside the group is that peer's own fault, and its
// text is read only up to the block's size.
func TestShmPeerStateIsBounded(t *testing.T) {
	for _, tc := range []struct {
		blamed   uint64
		textLen  uint64
		wantRank int
		wantOp   string
	}{
		{blamed: 0, textLen: 4, wantRank: 0, wantOp: "failed"},
		{blamed: 2, textLen: 1 << 40, wantRank: 2, wantOp: "failed"},
		{blamed: 3, textLen: 4, wantRank: 1, wantOp: "frame"},
		{blamed: 1 << 31, textLen: 4, wantRank: 1, wantOp: "frame"},
	} {
		t.Run(name("blamed=", tc.blamed), func(t *testing.T) {
			gs := newEngineGroups(t, 3, "shm")
			// Rank 1 plays a hostile peer through rank 0's view of its block.
			c := gs[0].shm.ctrl[1]
			copy(c.text[:], "boom")
			c.textLen.Store(tc.textLen)
			c.state.Store(shmAborted | tc.blamed<<32)
			err := gs[0].Barrier(testCtx(t))
			var re *RankError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.wantRank, re.Rank, "error %q", err)
			assert.Equal(t, tc.wantOp, re.Op, "error %q", err)
			if tc.wantOp == "failed" {
				assert.Contains(t, err.Error(), "reported by rank 1: boom")
			}
		})
	}
}

// A segment is mapped only if it is a sealed memfd that only this user can
// reopen, of exactly the size this side computed.
func TestMapSegmentRefuses(t *testing.T) {
	const size = 64 << 10
	memfd := func(t *testing.T, size int, mode uint32, seals int) int {
		fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		require.NoError(t, unix.Fchmod(fd, mode))
		require.NoError(t, unix.Ftruncate(fd, int64(size)))
		b, err := unix.Mmap(fd, 0, 8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		require.NoError(t, err)
		b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7] = 0x64, 0x6d, 0x61, 0x2d, 0x63, 0x6f, 0x6c, 0x6c
		require.NoError(t, unix.Munmap(b))
		if seals != 0 {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
			require.NoError(t, err)
		}
		return fd
	}
	sealed := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW
	seg, err := mapSegment(memfd(t, size, 0o600, sealed), size)
	require.NoError(t, err, "a well-formed segment")
	require.NoError(t, unix.Munmap(seg))

	for name, fd := range map[string]int{
		"unsealed":         memfd(t, size, 0o600, 0),
		"world-open":       memfd(t, size, 0o644, sealed),
		"too large":        memfd(t, 2*size, 0o600, sealed),
		"too small":        memfd(t, size/2, 0o600, sealed),
		"grow sealed only": memfd(t, size, 0o600, unix.F_SEAL_GROW),
	} {
		_, err := mapSegment(fd, size)
		assert.Error(t, err, name)
	}
	f, err := os.CreateTemp(t.TempDir(), "segment")
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(size))
	_, err = mapSegment(int(f.Fd()), size)
	assert.Error(t, err, "a regular file cannot be sealed")
}

// The socket's name comes from the conn's two addresses, rank 0's first,
// so both ends derive the same one, and conns of other pairs other ones.
func TestShmSocketName(t *testing.T) {
	conns := tcpMesh(t, 3)
	a, err := shmSocketName(conns[0][1].LocalAddr(), conns[0][1].RemoteAddr())
	require.NoError(t, err)
	b, err := shmSocketName(conns[1][0].RemoteAddr(), conns[1][0].LocalAddr())
	require.NoError(t, err)
	c, err := shmSocketName(conns[0][2].LocalAddr(), conns[0][2].RemoteAddr())
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
	assert.Regexp(t, `^@rdma-coll/[0-9a-f]{32}$`, a)
}

// A member maps only what a well-formed rank 0 passes: the hello must
// describe this group's layout and name, as rank 0, the process at the
// other end of the socket, and the descriptor must be a sealed private
// memfd of the layout's size. Anything else is an error and nothing stays
// mapped or open.
func TestReceiveSegmentRefuses(t *testing.T) {
	const n = 2
	lay := layoutFor(n)
	good := func() []byte {
		h := make([]byte, shmHelloLen(n))
		binary.LittleEndian.PutUint64(h[0:], shmMagic)
		binary.LittleEndian.PutUint64(h[8:], n)
		binary.LittleEndian.PutUint64(h[16:], uint64(lay.size))
		binary.LittleEndian.PutUint64(h[24:], uint64(os.Getpid()))
		binary.LittleEndian.PutUint64(h[32:], uint64(os.Getpid()))
		return h
	}
	segment := func(t *testing.T, size int, seal bool) int {
		fd, seg, err := createSegment(size)
		require.NoError(t, err)
		require.NoError(t, unix.Munmap(seg))
		if !seal {
			// createSegment seals: make an unsealed one of the same kind.
			unix.Close(fd)
			fd, err = unix.MemfdCreate("test", unix.MFD_CLOEXEC)
			require.NoError(t, err)
			require.NoError(t, unix.Fchmod(fd, 0o600))
			require.NoError(t, unix.Ftruncate(fd, int64(size)))
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	for _, tc := range []struct {
		name  string
		hello func() []byte
		fd    func(t *testing.T) int
		ok    bool
	}{
		{"well-formed", good, func(t *testing.T) int { return segment(t, lay.size, true) }, true},
		{"other size", func() []byte { h := good(); binary.LittleEndian.PutUint64(h[16:], uint64(lay.size*2)); return h },
			func(t *testing.T) int { return segment(t, lay.size*2, true) }, false},
		{"other group size", func() []byte { h := good(); binary.LittleEndian.PutUint64(h[8:], 3); return h },
			func(t *testing.T) int { return segment(t, lay.size, true) }, false},
		{"rank 0 is another process", func() []byte { h := good(); binary.LittleEndian.PutUint64(h[24:], 1); return h },
			func(t *testing.T) int { return segment(t, lay.size, true) }, false},
		{"unsealed", good, func(t *testing.T) int { return segment(t, lay.size, false) }, false},
		{"short", func() []byte { return good()[:20] }, func(t *testing.T) int { return segment(t, lay.size, true) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			name := "@rdma-coll-test/" + tc.name + "/" + strconv.Itoa(os.Getpid())
			type result struct {
				team *shmTeam
				err  error
			}
			done := make(chan result, 1)
			go func() {
				deadline, _ := ctx.Deadline()
				team, err := receiveSegment(ctx, name, 1, n, lay, deadline)
				done <- result{team, err}
			}()
			uc, _, err := dialMember(ctx, name, time.Now().Add(5*time.Second))
			require.NoError(t, err)
			defer uc.Close()
			_, _, err = uc.WriteMsgUnix(tc.hello(), unix.UnixRights(tc.fd(t)), nil)
			require.NoError(t, err)
			res := <-done
			if tc.ok {
				require.NoError(t, res.err)
				var b [1]byte
				_, err := uc.Read(b[:])
				require.NoError(t, err)
				assert.Equal(t, byte(1), b[0], "the member says it mapped the segment")
				res.team.free()
				return
			}
			require.Error(t, res.err)
			assert.Nil(t, res.team)
		})
	}
}

// Whatever rank 0 sends, parsing its hello returns an error or a table of
// valid process ids that names the processes this side knows.
func FuzzShmHello(f *testing.F) {
	const n, size, rank, pid0, self = 3, 1 << 20, 2, 100, 200
	good := make([]byte, shmHelloLen(n))
	binary.LittleEndian.PutUint64(good[0:], shmMagic)
	binary.LittleEndian.PutUint64(good[8:], n)
	binary.LittleEndian.PutUint64(good[16:], size)
	for r, p := range []uint64{pid0, 300, self} {
		binary.LittleEndian.PutUint64(good[24+8*r:], p)
	}
	f.Add(good)
	f.Add(good[:30])
	f.Add(append(append([]byte{}, good...), 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		pids, err := parseShmHello(b, n, size, rank, pid0, self)
		if err != nil {
			require.Nil(t, pids)
			return
		}
		require.Len(t, pids, n)
		require.Equal(t, pid0, pids[0])
		require.Equal(t, self, pids[rank])
		for _, p := range pids {
			require.True(t, p > 0 && p <= pidMax, "pid %d", p)
		}
	})
}

// A rank that posts the last step of the group's life and then closes has
// done its part: the rank waiting for that step takes the step, however the
// two stores fall around its checks of the peer's state.
func TestShmWaitTakesStepPostedBeforeClose(t *testing.T) {
	const op = 7 << 24
	for trial := range 300 {
		seg := make([]byte, layoutFor(2).size)
		waiter, peer := newShmTeam(seg, 2, 0), newShmTeam(seg, 2, 1)
		g := &Group{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range trial % 50 * 20 {
				runtime.Gosched()
			}
			peer.post(1, op, 0)
			peer.closed()
		}()
		err := waiter.waitAll(g, 1, op, 0)
		<-done
		require.NoError(t, err, "trial %d", trial)
	}
}

// sleepingPair is two ranks' views of one real segment, rank 0 set to
// sleep on the futex at once when it waits for rank 1 (as for a rank of
// another process), for up to a minute a sleep.
func sleepingPair(t *testing.T) (waiter, peer *shmTeam) {
	size := layoutFor(2).size
	fd, seg, err := createSegment(size)
	require.NoError(t, err)
	unix.Close(fd)
	t.Cleanup(func() { _ = unix.Munmap(seg) })
	waiter, peer = newShmTeam(seg, 2, 0), newShmTeam(seg, 2, 1)
	waiter.sleeps[1], waiter.spin, waiter.sleepMax = true, 0, int64(time.Minute)
	return waiter, peer
}

// A rank asleep on a peer's counter is woken by the peer's post (and by
// its abort), not by the end of its sleep; the sleeper count returns to 0.
func TestShmSleeperIsWoken(t *testing.T) {
	const op = 9 << 24
	for _, how := range []string{"post", "abort", "close"} {
		t.Run(how, func(t *testing.T) {
			waiter, peer := sleepingPair(t)
			errc := make(chan error, 1)
			go func() { errc <- waiter.waitAll(&Group{}, 1, op, 0) }()
			sleepers := &peer.ctrl[1].sleepPosted
			require.Eventually(t, func() bool { return sleepers.Load() == 1 }, 10*time.Second, time.Millisecond,
				"the waiter never slept")
			switch how {
			case "post":
				peer.post(1, op, 0)
			case "abort":
				peer.abort(1, "boom")
			default:
				peer.closed()
			}
			select {
			case err := <-errc:
				if how == "post" {
					require.NoError(t, err)
				} else {
					requireRank(t, err, 1)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the waiter was not woken by the %s", how)
			}
			assert.Zero(t, sleepers.Load())
		})
	}
}

// moveOffCPU lands the thread on another CPU of its mask and leaves the
// mask as it was.
func TestMoveOffCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &before))
	from, to, moved := moveOffCPU()
	require.NoError(t, unix.SchedGetaffinity(0, &after))
	assert.Equal(t, before, after, "the affinity mask changed")
	if before.Count() < 2 {
		assert.False(t, moved, "moved with one CPU allowed")
		return
	}
	require.True(t, moved)
	assert.NotEqual(t, from, to)
	assert.True(t, before.IsSet(int(to)), "moved to CPU %d, outside the mask", to)
}

// With more ranks than CPUs, a wait for a peer process in an operation of
// less than shmYieldBelow a rank spins, then yields the CPU for
// shmYieldPeer, then sleeps on the futex; with a CPU per rank, or in a
// larger operation, it sleeps right after spinning. One for a rank of
// this process yields for a millisecond, then naps.
func TestShmWaitYieldsBeforeSleeping(t *testing.T) {
	const spinUntil = int64(1e9)
	us := int64(time.Microsecond)
	cases := []struct {
		spreads, sleeps bool
		at              int64
		want            waitStep
	}{
		{false, true, spinUntil - 1, waitSpin},
		{false, true, spinUntil, waitYield},
		{false, true, spinUntil + int64(shmYieldPeer) - 1, waitYield},
		{false, true, spinUntil + int64(shmYieldPeer), waitFutex},
		{false, true, spinUntil + 5000*us, waitFutex},
		{true, true, spinUntil - 1, waitSpin},
		{true, true, spinUntil, waitFutex},
		{false, false, spinUntil - 1, waitSpin},
		{false, false, spinUntil + 999*us, waitYield},
		{false, false, spinUntil + 1000*us, waitNap},
		{true, false, spinUntil + 999*us, waitYield},
	}
	for _, c := range cases {
		for _, size := range []int{0, 4 << 10, shmYieldBelow - 1, shmYieldBelow, 16 << 20} {
			tm := &shmTeam{spreads: c.spreads}
			tm.expect(size)
			want := c.want
			if want == waitYield && c.sleeps && size >= shmYieldBelow {
				want = waitFutex
			}
			require.Equal(t, want, tm.nextWait(c.sleeps, c.at, spinUntil), "spreads %v, sleeps %v, %d bytes, %d ns after the spin", c.spreads, c.sleeps, size, c.at-spinUntil)
		}
	}
}

// requireNoAllocs runs each of ops on every one of d's n ranks once, then
// requires that further runs allocate nothing.
func requireNoAllocs(t *testing.T, d *driver, ops map[string]func(g *Group) error, n int) {
	t.Helper()
	for name, op := range ops {
		require.NoError(t, d.run(op), name)
		allocs := testing.AllocsPerRun(5, func() {
			if err := d.run(op); err != nil {
				t.Error(err)
			}
		})
		require.Zero(t, allocs, "%s allocates %v times per run (all %d ranks)", name, allocs, n)
	}
}
