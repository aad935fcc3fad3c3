package rdma

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"
)

// rsInVM reports whether the tests run in the Soft-RoCE VM
// (scripts/softroce-rsocket.sh), where they use the rdmacore provider (or
// RDMA_PROVIDER's) on $SOFTROCE_IP; elsewhere soft on loopback.
func rsInVM() bool { return os.Getenv("SOFTROCE_DEV") != "" }

// rsConfig is softConfig in rsocket mode (rdmacore in the VM).
func rsConfig() *Config {
	cfg := softConfig()
	cfg.Wire = WireRsocket
	if rsInVM() {
		if cfg.Provider = os.Getenv(ProviderEnv); cfg.Provider == "" {
			cfg.Provider = ProviderRDMACore
		}
	}
	return cfg
}

// rsHost: the rsocket tests listen on 127.0.7.1; in the Soft-RoCE VM, on
// the rxe address (the RDMA CM cannot bind rxe to loopback).
func rsHost(cfg *Config) string {
	if rsInVM() && cfg.Provider != ProviderSoft {
		return os.Getenv("SOFTROCE_IP")
	}
	return "127.0.7.1"
}

func rsListenT(t testing.TB, cfg *Config) net.Listener {
	t.Helper()
	ln, err := (&ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", net.JoinHostPort(rsHost(cfg), "0"))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// rsPair returns a dialed and an accepted conn in rsocket mode.
func rsPair(t testing.TB, cfg *Config) (c, s *RsocketConn) {
	t.Helper()
	if cfg == nil {
		cfg = rsConfig()
	}
	ln := rsListenT(t, cfg)
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	cc, err := (&Dialer{Config: cfg, Timeout: 10 * time.Second}).Dial("rdma", ln.Addr().String())
	require.NoError(t, err)
	sc := <-acc
	require.NotNil(t, sc)
	t.Cleanup(func() { cc.Close(); sc.Close() })
	return cc.(*RsocketConn), sc.(*RsocketConn)
}

func TestRsocketNettest(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		cfg := rsConfig()
		ln, err := (&ListenConfig{Config: cfg}).Listen(t.Context(), "rdma", net.JoinHostPort(rsHost(cfg), "0"))
		if err != nil {
			return nil, nil, nil, err
		}
		defer ln.Close()
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			acc <- c
		}()
		c1, err = (&Dialer{Config: cfg}).Dial("rdma", ln.Addr().String())
		if err != nil {
			return nil, nil, nil, err
		}
		c2 = <-acc
		if c2 == nil {
			c1.Close()
			return nil, nil, nil, errors.New("accept failed")
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// A stream far larger than both rbufs, in writes and reads of random
// sizes, both ways at once: credits and region grants keep it going, and
// every byte arrives in order.
func TestRsocketStream(t *testing.T) {
	cfg := rsConfig()
	cfg.RingSize = 8 << 10 // two 4 KiB halves: many grants
	cfg.SendBufferSize = 8 << 10
	cfg.RecvDepth = 16 // credit every 8 messages
	c, s := rsPair(t, cfg)
	total := 3 << 20
	if rsInVM() {
		total = 512 << 10 // the emulated guest moves tens of MB/s
	}
	run := func(w, r *RsocketConn, key int64) error {
		rnd := rand.New(rand.NewSource(key))
		src := make([]byte, total)
		rnd.Read(src)
		errc := make(chan error, 1)
		go func() {
			for off := 0; off < total; {
				n := min(total-off, 1+rnd.Intn(20000))
				if _, err := w.Write(src[off : off+n]); err != nil {
					errc <- err
					return
				}
				off += n
			}
			errc <- nil
		}()
		got := make([]byte, 0, total)
		buf := make([]byte, 30000)
		rr := rand.New(rand.NewSource(key + 1))
		for len(got) < total {
			n, err := r.Read(buf[:1+rr.Intn(len(buf))])
			if err != nil {
				return err
			}
			got = append(got, buf[:n]...)
		}
		if !bytes.Equal(src, got) {
			return errors.New("stream corrupted")
		}
		return <-errc
	}
	done := make(chan error, 1)
	go func() { done <- run(s, c, 2) }()
	require.NoError(t, run(c, s, 1))
	require.NoError(t, <-done)
	assert.Equal(t, "rdma", c.LocalAddr().Network())
	assert.Equal(t, s.LocalAddr().String(), c.RemoteAddr().String())
	assert.Equal(t, cfg.Provider, c.Provider())
}

// One way only, the reader slower than the writer: credit must go back
// from Read itself, as no completion on the reader's side prompts it.
func TestRsocketOneWay(t *testing.T) {
	cfg := rsConfig()
	cfg.RingSize = 8 << 10
	cfg.RecvDepth = 16
	c, s := rsPair(t, cfg)
	src := make([]byte, 1<<20)
	if rsInVM() {
		src = src[:128<<10]
	}
	rand.New(rand.NewSource(3)).Read(src)
	go func() {
		c.Write(src)
		c.CloseWrite()
	}()
	got := make([]byte, 0, len(src))
	buf := make([]byte, 3000)
	for {
		n, err := s.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if len(got)%7 == 0 {
			time.Sleep(time.Millisecond) // let the writer run dry
		}
	}
	require.True(t, bytes.Equal(src, got))
}

// CloseWrite is rsockets' shutdown(SHUT_WR): the peer reads the data, then
// EOF, and can still answer.
func TestRsocketCloseWrite(t *testing.T) {
	c, s := rsPair(t, nil)
	msg := bytes.Repeat([]byte("half-close "), 10000)
	_, err := c.Write(msg)
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	require.NoError(t, c.CloseWrite(), "again: nothing to do")
	_, err = c.Write([]byte("x"))
	require.ErrorIs(t, err, syscall.EPIPE)
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	n, err := s.Read(make([]byte, 1))
	require.Equal(t, 0, n)
	require.ErrorIs(t, err, io.EOF, "EOF again")

	// The other direction is open.
	_, err = s.Write([]byte("answer"))
	require.NoError(t, err)
	require.NoError(t, s.CloseWrite())
	got, err = io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "answer", string(got))
}

// The peer's Close: its data is read, then EOF; writes then fail with
// ECONNRESET, as to a TCP peer that closed.
func TestRsocketPeerClose(t *testing.T) {
	c, s := rsPair(t, nil)
	msg := bytes.Repeat([]byte{7}, 300000)
	go func() {
		c.Write(msg)
		c.Close()
	}()
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	require.Eventually(t, func() bool {
		_, err := s.Write([]byte("x"))
		return errors.Is(err, syscall.ECONNRESET)
	}, 5*time.Second, 10*time.Millisecond)
	var op *net.OpError
	_, err = s.Write([]byte("x"))
	require.ErrorAs(t, err, &op)
	require.Equal(t, "rdma", op.Net)
	require.Equal(t, "write", op.Op)
}

func TestRsocketCloseUnblocks(t *testing.T) {
	c, s := rsPair(t, nil)
	errc := make(chan error, 2)
	go func() {
		_, err := c.Read(make([]byte, 10))
		errc <- err
	}()
	go func() { // the peer does not read: the write blocks on credit
		_, err := c.Write(make([]byte, 10<<20))
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c.Close())
	for i := 0; i < 2; i++ {
		select {
		case err := <-errc:
			require.ErrorIs(t, err, net.ErrClosed)
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not unblock")
		}
	}
	require.ErrorIs(t, c.Close(), net.ErrClosed)
	_ = s
}

func TestRsocketDeadline(t *testing.T) {
	c, _ := rsPair(t, nil)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
}

func TestRsocketWireConfig(t *testing.T) {
	_, err := (&Dialer{Config: &Config{Provider: ProviderSoft, Wire: "nope"}}).Dial("rdma", "127.0.7.1:1")
	require.ErrorContains(t, err, "unknown wire protocol")
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "dial", op.Op)
	_, err = (&ListenConfig{Config: &Config{Provider: ProviderSoft, Wire: "nope"}}).Listen(context.Background(), "rdma", "127.0.7.1:0")
	require.ErrorContains(t, err, "unknown wire protocol")

	t.Setenv(WireEnv, WireRsocket)
	t.Setenv(ProviderEnv, ProviderSoft)
	ln, err := Listen("rdma", "127.0.7.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, err = ln.(*Listener).AcceptRDMA()
	require.ErrorContains(t, err, "rsocket")

	// The two protocols do not mix: a default-mode dial is refused by an
	// rsocket listener, and the other way round.
	t.Setenv(WireEnv, "")
	_, err = (&Dialer{Config: softConfig(), Timeout: 5 * time.Second}).Dial("rdma", ln.Addr().String())
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	plain, err := (&ListenConfig{Config: softConfig()}).Listen(context.Background(), "rdma", "127.0.7.1:0")
	require.NoError(t, err)
	defer plain.Close()
	_, err = (&Dialer{Config: &Config{Provider: ProviderSoft, Wire: WireRsocket}, Timeout: 5 * time.Second}).Dial("rdma", plain.Addr().String())
	require.Error(t, err)
}

// Writes and reads of a message allocate nothing.
func TestRsocketZeroAllocs(t *testing.T) {
	c, s := rsPair(t, nil)
	msg := make([]byte, 64)
	buf := make([]byte, 64)
	// A connection that talks moves to shared memory after a few frames,
	// in the background (its rings are made then): measure once it has.
	var err error
	require.Eventually(t, func() bool {
		if _, err = c.Write(msg); err == nil {
			_, err = io.ReadFull(s, buf)
		}
		return err != nil || settled(c) && settled(s)
	}, 10*time.Second, time.Millisecond, "the conn moves to shared memory")
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// A deadline set while a Read or Write is blocked applies to it: moved
// from none to soon, the blocked call returns a timeout then, as on Conn.
// The call sleeps on the completion channel: unless setting the deadline
// wakes it, it saw the new one only at the watch's next tick, seconds on.
func TestRsocketDeadlineMovedWhileBlocked(t *testing.T) {
	for _, side := range []string{"read", "write"} {
		t.Run(side, func(t *testing.T) {
			c, _ := rsPair(t, nil)
			done := make(chan error, 1)
			go func() {
				if side == "read" {
					_, err := c.Read(make([]byte, 64))
					done <- err
					return
				}
				// The peer reads nothing: Writes block once its ring is full.
				p := make([]byte, 64<<10)
				for {
					if _, err := c.Write(p); err != nil {
						done <- err
						return
					}
				}
			}()
			time.Sleep(200 * time.Millisecond) // asleep by now
			select {
			case err := <-done:
				t.Fatalf("%s returned before the deadline was set: %v", side, err)
			default:
			}
			dl := time.Now().Add(50 * time.Millisecond)
			if side == "read" {
				require.NoError(t, c.SetReadDeadline(dl))
			} else {
				require.NoError(t, c.SetWriteDeadline(dl))
			}
			select {
			case err := <-done:
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			case <-time.After(time.Until(dl) + time.Second):
				t.Fatalf("%s still blocked 1 s after its deadline", side)
			}
		})
	}
}

// A disconnect that the watch sees while a Read holds the poll role asleep,
// its data still in the CQ, must not end the stream before that data: the
// data comes first, then io.EOF. The test holds the role itself, standing
// in for a reader that the disconnect's wake-up reaches before it polled.
func TestRsocketDisconnectAfterDataWhileRoleHeld(t *testing.T) {
	c, s := rsPair(t, nil)
	s.c.Core.Mu.Lock()
	require.True(t, s.c.Core.Poll.TakeLocked())
	s.c.Core.Mu.Unlock()
	msg := make([]byte, 3000)
	rand.New(rand.NewSource(1)).Read(msg)
	_, err := c.Write(msg)
	require.NoError(t, err)
	require.NoError(t, c.Close()) // returns once the data completed
	// Wait until the disconnect reached s's watch: it ends the stream
	// (peerGone), or waits to take the role from the holder (claimed).
	require.Eventually(t, func() bool {
		s.c.Core.Mu.Lock()
		defer s.c.Core.Mu.Unlock()
		return s.c.PeerGoneLocked() || s.c.Core.Poll.Claimed
	}, 10*time.Second, time.Millisecond)
	s.c.Core.Mu.Lock()
	s.c.Core.Poll.ReleaseLocked()
	s.c.Core.Mu.Unlock()
	require.NoError(t, s.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	assert.Equal(t, len(msg), len(got), "bytes read before EOF")
	assert.True(t, bytes.Equal(msg, got), "data read differs")
}
