package testsupport

import (
	"io"
	"net"
	"testing"
)

// Connect dials ln's address with dial while it accepts on ln, and returns
// both ends, which are closed at cleanup. Either failing fails t.
func Connect(t testing.TB, ln net.Listener, dial func(addr string) (net.Conn, error)) (client, server net.Conn) {
	t.Helper()
	client, server, err := TryConnect(ln, dial)
	if err != nil {
		t.Fatalf("connecting to %v: %v", ln.Addr(), err)
	}
	t.Cleanup(func() {
		client.Close()
		server.Close()
	})
	return client, server
}

// TryConnect is Connect for callers that handle the error themselves (a
// nettest.MakePipe): nothing is closed for them. After a failed dial, the
// Accept it started ends when the caller closes ln.
func TryConnect(ln net.Listener, dial func(addr string) (net.Conn, error)) (client, server net.Conn, err error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	client, err = dial(ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		client.Close()
		return nil, nil, a.err
	}
	return client, a.c, nil
}

// TCP returns both ends of a loopback TCP connection on ip ("127.0.0.1"
// when empty), closed at cleanup: the baseline of benchmarks.
func TCP(t testing.TB, ip string) (client, server net.Conn) {
	t.Helper()
	if ip == "" {
		ip = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listening on %s: %v", ip, err)
	}
	defer ln.Close()
	return Connect(t, ln, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) })
}

// Serves checks that ln still accepts a conn dialed with dial and echoes
// what comes over it.
func Serves(t testing.TB, ln net.Listener, dial func(addr string) (net.Conn, error)) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err == nil {
			_, err = io.Copy(s, s)
			s.Close()
		}
		done <- err
	}()
	c, err := dial(ln.Addr().String())
	if err != nil {
		t.Fatalf("dialing %v: %v", ln.Addr(), err)
	}
	defer c.Close()
	const msg = "still there?"
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("writing to %v: %v", ln.Addr(), err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading the echo from %v: %v", ln.Addr(), err)
	}
	if string(buf) != msg {
		t.Fatalf("%v echoed %q, want %q", ln.Addr(), buf, msg)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("closing: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serving: %v", err)
	}
}
