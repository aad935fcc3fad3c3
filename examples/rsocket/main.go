// Command rsocket is the Go side of rsockets interop: rdma.Dial and
// rdma.Listen with Config.Wire = "rsocket", against rdma-core's rstream or
// any TCP program run with LD_PRELOAD=librspreload.so (see
// examples/c/rsocket/echo.c and scripts/softroce-rsocket.sh).
//
//	rsocket rstream-server -addr IP:PORT -S 65536 -C 100 [-I 1]   serve one rstream client
//	rsocket rstream-client -addr IP:PORT -S 65536 -C 100 [-I 1]   be an rstream client
//	rsocket echo-server -addr IP:PORT [-conns 1]                  echo until EOF, then close
//	rsocket echo-client -addr IP:PORT -bytes N                    send, check the echo, CloseWrite, want EOF
//	rsocket sink -addr IP:PORT                                    accept one, read until EOF or error
//
// rstream modes follow rstream's custom test (-S size -C count -I
// iterations) with its verification on: a 16-byte exchange, then per
// iteration count transfers of size bytes from client to server and back;
// each direction carries bytes 0, 1, 2, ... (mod 256) from its first byte.
// Timed lines read: name size count iterations seconds usec/xfer, as
// rstream prints them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmanet/rdma"
)

var cfg = &rdma.Config{Wire: rdma.WireRsocket}

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: rsocket rstream-server|rstream-client|echo-server|echo-client|sink -addr IP:PORT ...")
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:7471", "address to listen on or dial")
	size := fs.Int("S", 1000, "rstream: transfer size")
	count := fs.Int("C", 1000, "rstream: transfers per iteration and direction")
	iters := fs.Int("I", 1, "rstream: iterations")
	conns := fs.Int("conns", 1, "echo-server: connections to serve, one after another")
	bytes := fs.Int64("bytes", 1<<20, "echo-client: bytes to send")
	rbuf := fs.Int("rbuf", 0, "receive buffer bytes (Config.RingSize; 0: rsocket's default)")
	fs.BoolVar(&cfg.BusyPoll, "busypoll", false, "poll without ever sleeping (Config.BusyPoll), as rstream does without -T b")
	fs.Parse(os.Args[2:])
	log.SetPrefix("rsocket " + mode + ": ")
	cfg.RingSize = *rbuf
	cfg.SendBufferSize = *rbuf

	var err error
	switch mode {
	case "rstream-server":
		err = serve(*addr, 1, func(c net.Conn) error { return rstream(c, false, *size, *count, *iters) })
	case "rstream-client":
		err = dial(*addr, func(c net.Conn) error { return rstream(c, true, *size, *count, *iters) })
	case "echo-server":
		err = serve(*addr, *conns, echo)
	case "echo-client":
		err = dial(*addr, func(c net.Conn) error { return echoClient(c, *bytes) })
	case "sink":
		err = serve(*addr, 1, sink)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func serve(addr string, n int, f func(net.Conn) error) error {
	ln, err := (&rdma.ListenConfig{Config: cfg}).Listen(context.Background(), "rdma", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("listening on %v\n", ln.Addr())
	for i := 0; i < n; i++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		err = f(c)
		c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// dial connects, retrying for a while as long as nothing listens there
// yet (the C server may still be starting).
func dial(addr string, f func(net.Conn) error) error {
	var c net.Conn
	var err error
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		c, err = (&rdma.Dialer{Config: cfg, Timeout: 30 * time.Second}).Dial("rdma", addr)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 30*time.Second {
			break
		}
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// pattern is rstream's format_buf/verify_buf: a byte counter running over
// the whole direction.
type pattern struct{ next byte }

func (p *pattern) fill(b []byte) {
	for i := range b {
		b[i] = p.next
		p.next++
	}
}

func (p *pattern) check(b []byte, at int64) error {
	for i := range b {
		if b[i] != p.next {
			return fmt.Errorf("data verification failed at byte %d: %d, want %d", at+int64(i), b[i], p.next)
		}
		p.next++
	}
	return nil
}

// rstream runs rstream's custom test; client is rstream -s, else rstream -b.
func rstream(c net.Conn, client bool, size, count, iters int) error {
	buf := make([]byte, max(size, 16))
	var out, in pattern
	var sent, got int64
	send := func(n int) error {
		out.fill(buf[:n])
		_, err := c.Write(buf[:n])
		sent += int64(n)
		return err
	}
	recv := func(n int) error {
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return fmt.Errorf("after %d bytes: %w", got, err)
		}
		err := in.check(buf[:n], got)
		got += int64(n)
		return err
	}
	first, second := send, recv
	if !client {
		first, second = recv, send
	}
	if err := first(16); err != nil {
		return err
	}
	if err := second(16); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		for t := 0; t < count; t++ {
			if err := first(size); err != nil {
				return err
			}
		}
		for t := 0; t < count; t++ {
			if err := second(size); err != nil {
				return err
			}
		}
	}
	el := time.Since(start)
	name := "go-server"
	if client {
		name = "go-client"
	}
	fmt.Printf("%s %d %d %d %.4fs %.2f usec/xfer (%d bytes sent, %d received, verified)\n", name, size, count, iters,
		el.Seconds(), float64(el.Microseconds())/float64(iters)/float64(count*2), sent, got)
	if client {
		return nil
	}
	// rstream ends with shutdown(SHUT_RDWR) and close: EOF here.
	if n, err := c.Read(buf[:1]); err != io.EOF {
		return fmt.Errorf("want EOF after the test, got %d bytes, %v", n, err)
	}
	return nil
}

func echo(c net.Conn) error {
	n, err := io.Copy(c, c)
	fmt.Printf("echoed %d bytes, then EOF\n", n)
	return err
}

func echoClient(c net.Conn, total int64) error {
	errc := make(chan error, 1)
	go func() {
		var p pattern
		buf := make([]byte, 64<<10)
		for off := int64(0); off < total; {
			n := int(min(total-off, int64(len(buf))))
			p.fill(buf[:n])
			if _, err := c.Write(buf[:n]); err != nil {
				errc <- err
				return
			}
			off += int64(n)
		}
		errc <- c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	var p pattern
	buf := make([]byte, 64<<10)
	var got int64
	for {
		n, err := c.Read(buf)
		if cerr := p.check(buf[:n], got); cerr != nil {
			return cerr
		}
		got += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := <-errc; err != nil {
		return err
	}
	if got != total {
		return fmt.Errorf("echo: %d bytes back, want %d", got, total)
	}
	fmt.Printf("echo client: %d bytes echoed and checked, EOF after CloseWrite\n", total)
	return nil
}

// sink reads until the peer is gone and says how: EOF is what a TCP peer
// that dies produces.
func sink(c net.Conn) error {
	start := time.Now()
	n, err := io.Copy(io.Discard, c)
	fmt.Printf("sink: %d bytes, then %v after %v\n", n, map[bool]string{true: "EOF", false: fmt.Sprint(err)}[err == nil], time.Since(start).Round(time.Millisecond))
	return err
}
