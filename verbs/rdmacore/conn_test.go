//go:build cgo && linux

package rdmacore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/verbs/rdmacore"
)

// rdma.Conn carried by this provider on a real kernel RDMA stack (the
// Soft-RoCE VM of `make test-softroce`): the net.Conn behaviour the root
// package promises, over rdmacore instead of soft.

func vmAddr(t testing.TB) string {
	t.Helper()
	if os.Getenv("SOFTROCE_DEV") == "" {
		t.Skip("needs an RDMA device: SOFTROCE_DEV is unset, run it inside the Soft-RoCE VM with `make test-softroce`")
	}
	ip := os.Getenv("SOFTROCE_IP")
	if i := strings.IndexByte(ip, '/'); i >= 0 {
		ip = ip[:i]
	}
	require.NotNil(t, net.ParseIP(ip), "SOFTROCE_IP %q", ip)
	return net.JoinHostPort(ip, "0")
}

func config() *rdma.Config { return &rdma.Config{Provider: rdmacore.ProviderName} }

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := (&rdma.ListenConfig{Config: config()}).Listen(context.Background(), "rdma", vmAddr(t))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

func dialPair(ln net.Listener) (client, server net.Conn, err error) {
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	d := rdma.Dialer{Config: config(), Timeout: 20 * time.Second}
	client, err = d.Dial("rdma", ln.Addr().String())
	if err != nil {
		ln.Close()
		<-acc
		return nil, nil, err
	}
	server = <-acc
	if server == nil {
		client.Close()
		return nil, nil, errors.New("accept failed")
	}
	return client, server, nil
}

func pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	c, s, err := dialPair(listen(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c, s
}

func TestConnEcho(t *testing.T) {
	c, s := pair(t)
	assert.Equal(t, "rdmacore", c.(*rdma.Conn).Provider())
	assert.Equal(t, "rdmacore", s.(*rdma.Conn).Provider())
	assert.Equal(t, s.LocalAddr().String(), c.RemoteAddr().String())
	for _, n := range []int{1, 64, 4096, 65537, 3 << 20} {
		msg := make([]byte, n)
		rand.New(rand.NewSource(int64(n))).Read(msg)
		go func() {
			_, err := c.Write(msg)
			assert.NoError(t, err)
		}()
		got := make([]byte, n)
		_, err := io.ReadFull(s, got)
		require.NoError(t, err)
		require.True(t, bytes.Equal(msg, got), "%d bytes", n)
	}
}

func TestConnNettest(t *testing.T) {
	ln := listen(t)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		c1, c2, err = dialPair(ln)
		if err != nil {
			return nil, nil, nil, err
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// CloseWrite is a half-close: the peer reads EOF and can still answer.
func TestConnHalfClose(t *testing.T) {
	c, s := pair(t)
	_, err := c.Write([]byte("request"))
	require.NoError(t, err)
	require.NoError(t, c.(*rdma.Conn).CloseWrite())
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	assert.Equal(t, "request", string(got))
	_, err = s.Write([]byte("answer"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	got, err = io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "answer", string(got))
}

// A peer's Close is EOF after the data, and unblocks a pending Read.
func TestConnPeerClose(t *testing.T) {
	c, s := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(s)
		done <- err
	}()
	_, err := c.Write([]byte("bye"))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the peer's Close did not end Read")
	}
}

func TestConnYamux(t *testing.T) {
	c, s := pair(t)
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	// The VM is emulated: leave room for its speed.
	cfg.ConnectionWriteTimeout = time.Minute
	client, err := yamux.Client(c, cfg)
	require.NoError(t, err)
	defer client.Close()
	server, err := yamux.Server(s, cfg)
	require.NoError(t, err)
	defer server.Close()
	go func() {
		for {
			st, err := server.Accept()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				io.Copy(st, st)
			}()
		}
	}()
	const streams, size = 8, 128 << 10
	var wg sync.WaitGroup
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, err := client.Open()
			if !assert.NoError(t, err) {
				return
			}
			defer st.Close()
			want := make([]byte, size)
			rand.New(rand.NewSource(int64(i))).Read(want)
			go st.Write(want)
			got := make([]byte, size)
			if _, err := io.ReadFull(st, got); assert.NoError(t, err) {
				assert.True(t, bytes.Equal(want, got), "stream %d", i)
			}
		}(i)
	}
	wg.Wait()
}

func TestConnHTTP(t *testing.T) {
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Write(bytes.ToUpper(body))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	tr := &http.Transport{DialContext: (&rdma.Dialer{Config: config(), Timeout: 20 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: time.Minute}
	for i := 0; i < 3; i++ {
		resp, err := cl.Post("http://"+ln.Addr().String()+"/", "text/plain", strings.NewReader("over rdma"))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, "OVER RDMA", string(b))
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// Connections come and go without leaking descriptors (completion channels,
// CM channels) or device objects.
func TestConnChurn(t *testing.T) {
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	d := rdma.Dialer{Config: config(), Timeout: 20 * time.Second}
	echo := func() {
		c, err := d.Dial("rdma", ln.Addr().String())
		require.NoError(t, err)
		_, err = c.Write([]byte("x"))
		require.NoError(t, err)
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	echo() // the first connection sets up what lives for the process (librdmacm's devices)
	before := openFDs(t)
	const n = 200
	for i := 0; i < n; i++ {
		echo()
	}
	// Accepted conns close as their echo ends; give them a moment.
	deadline := time.Now().Add(30 * time.Second)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	assert.LessOrEqual(t, openFDs(t), before, "descriptors leaked over %d connections", n)
}

func init() { rdmacore.PeerMain = peerMain }

// peerMain dials the address in RDMACORE_PEER, says "ready" and waits to be
// killed.
func peerMain() {
	d := rdma.Dialer{Config: config(), Timeout: 20 * time.Second}
	c, err := d.Dial("rdma", os.Getenv("RDMACORE_PEER"))
	if err != nil {
		os.Exit(3)
	}
	c.Write([]byte("ready"))
	time.Sleep(time.Hour)
}

// A peer process that dies (SIGKILL: nothing of it runs any more) ends the
// survivor's Read and Write with an error: the kernel tears the dead
// process's connection down, and the survivor hears of it.
func TestConnPeerKilled(t *testing.T) {
	ln := listen(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RDMACORE_PEER="+ln.Addr().String())
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	b := make([]byte, 5)
	_, err = io.ReadFull(s, b)
	require.NoError(t, err)
	require.Equal(t, "ready", string(b))
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(b)
		done <- err
	}()
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	killed = true
	select {
	case err := <-done:
		require.Error(t, err)
		t.Logf("read after the peer died: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Read did not end after the peer process died")
	}
	s.SetWriteDeadline(time.Now().Add(30 * time.Second))
	var werr error
	for i := 0; i < 1000 && werr == nil; i++ {
		_, werr = s.Write(make([]byte, 4096))
	}
	require.Error(t, werr)
	assert.False(t, errors.Is(werr, os.ErrDeadlineExceeded), "Write must fail, not time out: %v", werr)
}
