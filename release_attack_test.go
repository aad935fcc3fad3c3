package rdma

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/verbs"
)

// The tests in this file play a peer that keeps a Desc past the end of its
// exposure and uses it on memory this side reused (issue 43): a Buffer
// given back to its pool and handed out again, and a range exposed again
// after many exposures of the same bytes. The peer is another process,
// as another uid (nobody) when the test runs as root (soft then keeps to
// TCP), and as the test's own uid over shared memory.

func init() {
	// stale-desc ADDR: dial ADDR on soft, take a Desc (32 bytes), wait for
	// one more byte, then read the Desc's first 8 bytes and, if that
	// worked, write "evil...." over them. Prints "read refused" or "read
	// ok <bytes>", and "write ok" or "write refused".
	testsupport.RegisterPeer("stale-desc", func(args []string) int {
		d := Dialer{Config: softConfig(), Timeout: 10 * time.Second}
		nc, err := d.Dial("rdma", args[0])
		if err != nil {
			return 1
		}
		c := nc.(*Conn)
		defer c.Close()
		var msg [len(Desc{}) + 1]byte
		if _, err := io.ReadFull(c, msg[:]); err != nil {
			return 2
		}
		var desc Desc
		copy(desc[:], msg[:])
		local, err := AllocBuffer(4096)
		if err != nil {
			return 3
		}
		if err := c.ReadRemote(desc, 0, local.Bytes()[:8]); err != nil {
			fmt.Println("read refused")
			if !errors.Is(err, ErrRemoteAccess) {
				fmt.Println("unexpected", err)
			}
		} else {
			fmt.Printf("read ok %q\n", local.Bytes()[:8])
		}
		copy(local.Bytes(), "evil....")
		if err := c.WriteRemote(desc, 0, local.Bytes()[:8]); err != nil {
			fmt.Println("write refused")
		} else {
			fmt.Println("write ok")
		}
		c.Close()
		_ = local.Free()
		return 0
	})
}

// attackerAs runs the stale-desc peer against ln: as nobody when uid is
// not 0 (the test binary copied where nobody may run it), in env.
func attackerAs(t *testing.T, ln *Listener, env []string, uid int) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := testsupport.PeerCommand("stale-desc", ln.Addr().String())
	cmd.Env = append(cmd.Env, env...)
	if uid != 0 {
		dir, err := os.MkdirTemp("", "rdma-stale-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.NoError(t, os.Chmod(dir, 0o755))
		bin := filepath.Join(dir, "rdma.test")
		b, err := os.ReadFile(os.Args[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(bin, b, 0o755))
		cmd.Path, cmd.Args[0] = bin, bin
		cmd.Env = append(cmd.Env, "HOME=/")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

// attackers runs f once per soft path with the peer of another uid where
// it can be (TCP, as root), and of this uid over shared memory.
func attackers(t *testing.T, f func(t *testing.T, env []string, uid int)) {
	softTransports(t, func(t *testing.T, env []string) {
		uid := 0
		if os.Geteuid() == 0 && strings.Contains(env[0], "=0") {
			uid = 65534 // shared memory is only ever between one uid's processes
		}
		f(t, env, uid)
	})
}

// attack sends the peer behind s the Desc d, then, once arm has set the
// memory up, the signal to use it, and returns the peer's two lines.
func attack(t *testing.T, s *Conn, out *bufio.Reader, d Desc, arm func()) (read, write string) {
	t.Helper()
	_, err := s.Write(d[:])
	require.NoError(t, err)
	arm()
	_, err = s.Write([]byte{1})
	require.NoError(t, err)
	read, err = out.ReadString('\n')
	require.NoError(t, err)
	write, err = out.ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(read), strings.TrimSpace(write)
}

// A Buffer exposed to a peer, given back to its pool and handed out again
// by Get is out of the old Desc's reach: the peer's READ and WRITE are
// refused and the new holder's bytes stay theirs. Before Put ended the
// exposures, the peer read "SECRET!!" and wrote "evil...." on both paths.
func TestAttackPooledBufferStaleDesc(t *testing.T) {
	attackers(t, func(t *testing.T, env []string, uid int) {
		ln := listen(t, nil)
		_, out := attackerAs(t, ln, env, uid)
		nc, err := ln.Accept()
		require.NoError(t, err)
		s := nc.(*Conn)
		defer s.Close()
		pool, err := NewBufferPool(4096, 4)
		require.NoError(t, err)
		defer pool.Close()
		b, err := pool.Get()
		require.NoError(t, err)
		d, err := s.Expose(b, 0, 4096, AccessRead|AccessWrite)
		require.NoError(t, err)
		var again *Buffer
		read, write := attack(t, s, out, d, func() {
			require.NoError(t, pool.Put(b))
			_, err := s.Expose(b, 0, 8, AccessRead)
			require.Error(t, err, "a pooled Buffer cannot be exposed")
			again, err = pool.Get()
			require.NoError(t, err)
			require.Same(t, b, again, "the pool hands the same Buffer out")
			copy(again.Bytes(), "SECRET!!")
		})
		assert.Equal(t, "read refused", read)
		assert.Equal(t, "write refused", write)
		assert.Equal(t, "SECRET!!", string(again.Bytes()[:8]))
		require.NoError(t, pool.Put(again))
	})
}

// A range exposed and unexposed again and again gets a new rkey each time:
// the Desc of its first exposure does not reach its 257th, of the same
// bytes at the same address. With an 8-bit generation per key table slot,
// it did (the peer read "SECRET!!").
func TestAttackStaleDescAfterReexposure(t *testing.T) {
	attackers(t, func(t *testing.T, env []string, uid int) {
		ln := listen(t, nil)
		_, out := attackerAs(t, ln, env, uid)
		nc, err := ln.Accept()
		require.NoError(t, err)
		s := nc.(*Conn)
		defer s.Close()
		b := allocBuffer(t, 4096)
		d, err := s.Expose(b, 0, 4096, AccessRead|AccessWrite)
		require.NoError(t, err)
		read, write := attack(t, s, out, d, func() {
			require.NoError(t, s.Unexpose(d))
			for range 255 {
				e, err := s.Expose(b, 0, 4096, AccessRead|AccessWrite)
				require.NoError(t, err)
				require.NoError(t, s.Unexpose(e))
			}
			_, err := s.Expose(b, 0, 4096, AccessRead|AccessWrite)
			require.NoError(t, err)
			copy(b.Bytes(), "SECRET!!")
		})
		assert.Equal(t, "read refused", read)
		assert.Equal(t, "write refused", write)
		assert.Equal(t, "SECRET!!", string(b.Bytes()[:8]))
	})
}

// No interleaving of Close, Free, Unexpose and Put unmaps or hands out a
// Buffer that a registration still covers: many rounds of a connection
// whose Buffers are exposed (and written by the peer) while Close, Free,
// Unexpose and Put race. Free and Put must succeed (nothing uses the
// Buffers), and once each has returned, no MR covers its memory beyond
// the local registrations a pooled Buffer keeps. Before Close deregistered
// the exposures under the connection's lock, Free found the connection's
// zero-copy state gone while its MRs were still there, and unmapped under
// them (now verbs.Memory.Free refuses that: EBUSY).
func TestCloseRacingFree(t *testing.T) {
	rounds := 150
	if testing.Short() {
		rounds = 30
	}
	const workers = 3
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if err := closeFreeRound(t, w*rounds+i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// closeFreeRound is one round of TestCloseRacingFree.
func closeFreeRound(t *testing.T, i int) error {
	c, s := pair(t, nil)
	defer c.Close()
	pool, err := NewBufferPool(8192, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	var freed, pooled [3]*Buffer
	var descs []Desc
	for k := range freed {
		if freed[k], err = AllocBuffer(8192); err != nil {
			return err
		}
		if pooled[k], err = pool.Get(); err != nil {
			return err
		}
		// Many exposures each, so that Close takes a while deregistering
		// them, for the others to run beside.
		for j := range 12 {
			for _, b := range []*Buffer{freed[k], pooled[k]} {
				d, err := s.Expose(b, j*256, 4096, AccessRead|AccessWrite)
				if err != nil {
					return err
				}
				descs = append(descs, d)
			}
		}
	}
	// The peer writes into every exposure while the rest goes on.
	src, err := AllocBuffer(8192)
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		_ = src.Free()
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, d := range descs {
				select {
				case <-stop:
					return
				default:
				}
				if c.WriteRemote(d, 0, src.Bytes()[:4096]) != nil {
					return
				}
			}
		}
	}()
	var mu sync.Mutex
	var problems []string
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var race sync.WaitGroup
	start := make(chan struct{})
	run := func(f func()) {
		race.Add(1)
		go func() {
			defer race.Done()
			<-start
			f()
		}()
	}
	run(func() { s.Close() })
	for k := range freed {
		b := freed[k]
		run(func() {
			if err := b.Free(); err != nil {
				report("round %d: Free: %v", i, err)
			}
		})
		p := pooled[k]
		run(func() {
			if err := pool.Put(p); err != nil {
				report("round %d: Put: %v", i, err)
				return
			}
			// Put returned: no exposure covers it. A Buffer Get hands
			// out again keeps at most its local registration.
			if n := p.b.Memory().Registered(); n > 1 {
				report("round %d: %d MRs cover a pooled Buffer after Put", i, n)
			}
		})
	}
	for _, d := range descs[:2] {
		run(func() { _ = s.Unexpose(d) })
	}
	close(start)
	race.Wait()
	close(stop)
	wg.Wait()
	s.Close()
	for k, b := range freed {
		if n := b.b.Memory().Registered(); n != 0 {
			report("round %d: %d MRs cover freed Buffer %d", i, n, k)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// verbs.Memory.Free refuses while any MR covers the block, of any PD.
func TestMemoryFreeRefusedWhileRegistered(t *testing.T) {
	c, s := pair(t, nil)
	b := allocBuffer(t, 4096)
	d1, err := s.Expose(b, 0, 4096, AccessRead)
	require.NoError(t, err)
	d2, err := c.Expose(b, 100, 200, AccessWrite)
	require.NoError(t, err)
	err = b.b.Memory().Free()
	require.ErrorIs(t, err, syscall.EBUSY)
	require.ErrorIs(t, err, verbs.ErrMemoryRegistered)
	require.NoError(t, s.Unexpose(d1))
	require.ErrorIs(t, b.b.Memory().Free(), syscall.EBUSY, "the other connection's MR still covers it")
	require.NoError(t, c.Unexpose(d2))
	assert.Equal(t, 0, b.b.Memory().Registered())
	// Still usable: nothing was freed.
	copy(b.Bytes(), "alive")
	assert.True(t, bytes.HasPrefix(b.Bytes(), []byte("alive")))
}

// A peer that never takes its notifications holds WriteRemoteNotifyContext
// no longer than its context: at its deadline (context.DeadlineExceeded) or
// its cancellation, having posted nothing; a plain write still goes.
func TestRemoteNotifyContext(t *testing.T) {
	c, s := pair(t, nil)
	target := allocBuffer(t, 4096)
	d, err := s.Expose(target, 0, 4096, AccessWrite)
	require.NoError(t, err)
	d = sendDesc(t, s, c, d)
	local := allocBuffer(t, 4096)
	sent := 0
	for ; sent < 1000; sent++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		err = c.WriteRemoteNotifyContext(ctx, d, 0, local.Bytes()[:8], 1)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
			break
		}
	}
	require.Positive(t, sent)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.WriteRemoteNotifyContext(ctx, d, 0, local.Bytes()[:8], 2) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("cancellation did not end the wait for a credit")
	}
	require.NoError(t, c.WriteRemoteContext(context.Background(), d, 0, local.Bytes()[:8]))
	// The peer takes them all, and then the next goes.
	for range sent {
		_, _, err := s.WaitNotify(context.Background())
		require.NoError(t, err)
	}
	require.NoError(t, c.WriteRemoteNotifyContext(context.Background(), d, 0, local.Bytes()[:8], 3))
	v, _, err := s.WaitNotify(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint32(3), v)
}

// A Buffer exposed on many connections, each closed after its exposure
// ended (Unexpose, or Put), keeps none of them.
func TestBufferForgetsConnections(t *testing.T) {
	pool, err := NewBufferPool(4096, 1)
	require.NoError(t, err)
	defer pool.Close()
	for i := range 6 {
		b, err := pool.Get()
		require.NoError(t, err)
		c, s := pair(t, nil)
		d, err := s.Expose(b, 0, 4096, AccessRead)
		require.NoError(t, err)
		regs := b.b.Holders
		if i%2 == 0 {
			require.NoError(t, s.Unexpose(d))
			assert.Zero(t, regs(), "round %d: connections kept after Unexpose", i)
		}
		require.NoError(t, pool.Put(b))
		assert.Zero(t, regs(), "round %d: connections kept after Put", i)
		c.Close()
		s.Close()
	}
}
