package rdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

func TestDialErrors(t *testing.T) {
	// Nothing listens on this port: a refused dial, as an OpError.
	ln := listen(t, nil)
	addr := ln.Addr().String()
	ln.Close()
	d := Dialer{Config: softConfig(), Timeout: 5 * time.Second}
	_, err := d.Dial("rdma", addr)
	require.Error(t, err)
	var oe *net.OpError
	require.True(t, errors.As(err, &oe), "%T %v", err, err)
	assert.Equal(t, "dial", oe.Op)
	assert.Equal(t, "rdma", oe.Net)

	_, err = d.Dial("udp", addr)
	var une net.UnknownNetworkError
	assert.True(t, errors.As(err, &une), "%v", err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = d.DialContext(ctx, "rdma", addr)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
}

func TestListenErrors(t *testing.T) {
	_, err := Listen("unix", "127.0.0.1:0")
	var une net.UnknownNetworkError
	assert.True(t, errors.As(err, &une))
	var oe *net.OpError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "listen", oe.Op)
	assert.Equal(t, "rdma", oe.Net)

	ln := listen(t, nil)
	_, err = (&ListenConfig{Config: softConfig()}).Listen(context.Background(), "rdma", ln.Addr().String())
	require.Error(t, err, "a second listener on the same port")
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "listen", oe.Op)
}

// Every network name the package accepts carries an echo both ways, and
// addresses say "rdma" whichever name was asked for.
func TestNetworks(t *testing.T) {
	for _, tc := range []struct{ listen, host, dial string }{
		{"rdma", "127.0.0.1", "rdma"},
		{"rdma4", "127.0.0.1", "rdma4"},
		{"tcp", "127.0.0.1", "tcp"},
		{"tcp4", "127.0.0.1", "tcp4"},
		{"rdma6", "::1", "tcp6"},
	} {
		t.Run(tc.listen, func(t *testing.T) {
			lc := ListenConfig{Config: softConfig()}
			ln, err := lc.Listen(context.Background(), tc.listen, net.JoinHostPort(tc.host, "0"))
			if err != nil && tc.host == "::1" {
				t.Skipf("no IPv6 loopback here: %v", err)
			}
			require.NoError(t, err)
			defer ln.Close()
			assert.Equal(t, "rdma", ln.Addr().Network())
			d := Dialer{Config: softConfig()}
			testsupport.Serves(t, ln, func(addr string) (net.Conn, error) {
				c, err := d.Dial(tc.dial, addr)
				if err == nil {
					assert.Equal(t, "rdma", c.LocalAddr().Network())
					assert.Equal(t, ln.Addr().String(), c.RemoteAddr().String())
				}
				return c, err
			})
		})
	}
	d := Dialer{Config: softConfig()}
	_, err := d.Dial("rdma4", "[::1]:1")
	assert.Error(t, err)
}

// Garbage and silent half-open TCP connections on a soft listener's port
// never stall Accept or an honest client.
func TestGarbageOnPort(t *testing.T) {
	ln := listen(t, softConfig())
	addr := ln.Addr().String()
	var junk []net.Conn
	defer func() {
		for _, c := range junk {
			c.Close()
		}
	}()
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 30; i++ {
		// Half-open: connects and never says anything.
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		junk = append(junk, c)
		// Garbage: random bytes of random length, then silence.
		g, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		b := make([]byte, 1+rng.Intn(4096))
		rng.Read(b)
		g.Write(b)
		junk = append(junk, g)
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ln.Accept()
			if !assert.NoError(t, err) {
				return
			}
			io.Copy(s, s)
			s.Close()
		}()
	}
	start := time.Now()
	for i := 0; i < 3; i++ {
		c := dial(t, ln, nil)
		_, err := c.Write([]byte("honest"))
		require.NoError(t, err)
		b := make([]byte, 6)
		_, err = io.ReadFull(c, b)
		require.NoError(t, err)
		assert.Equal(t, "honest", string(b))
		c.Close()
	}
	wg.Wait()
	t.Logf("3 honest connections among 60 junk ones took %v", time.Since(start))
}

// A thousand connections dialled at once from one host, as a client pool
// warming up does, are all accepted: a burst beyond the listener's
// handshake slots (64, and 8 per host on soft) and its backlog (128) waits
// its turn instead of being reset or refused.
func TestDialBurst(t *testing.T) {
	const n = 1000
	needFDs(t, 8*n)
	ln := listen(t, softConfig())
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				_ = echoOne(s)
			}()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialer(ln, softConfig())(ln.Addr().String())
			if err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
				return
			}
			defer c.Close()
			b := [1]byte{byte(i)}
			if _, err := c.Write(b[:]); err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
				return
			}
			if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != byte(i) {
				errs <- fmt.Errorf("conn %d: echo %d: %v", i, b[0], err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		failed = append(failed, err)
	}
	require.Empty(t, failed, "%d of %d dials failed", len(failed), n)
}

func TestDialLocalAddr(t *testing.T) {
	ln := listen(t, softConfig())
	go func() {
		if s, err := ln.Accept(); err == nil {
			io.Copy(s, s)
			s.Close()
		}
	}()
	for _, la := range []net.Addr{&Addr{IP: net.IPv4(127, 0, 0, 2)}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}} {
		d := Dialer{Config: softConfig(), LocalAddr: la}
		c, err := d.Dial("rdma", ln.Addr().String())
		require.NoError(t, err)
		want := la.(interface{ String() string }).String()
		host, _, _ := net.SplitHostPort(c.LocalAddr().String())
		assert.Contains(t, want, host)
		c.Close()
		go func() {
			if s, err := ln.Accept(); err == nil {
				io.Copy(s, s)
				s.Close()
			}
		}()
	}
}

// A dial to a port where something accepts TCP but never answers the
// handshake ends at the Dialer's timeout, as a timeout error.
func TestDialTimeout(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tl.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	d := Dialer{Config: softConfig(), Timeout: 300 * time.Millisecond}
	start := time.Now()
	_, err = d.Dial("rdma", tl.Addr().String())
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
	var ne net.Error
	require.True(t, errors.As(err, &ne))
	assert.True(t, ne.Timeout())

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = (&Dialer{Config: softConfig()}).DialContext(ctx, "rdma", tl.Addr().String())
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
}
