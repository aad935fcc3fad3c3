// Command echo runs an rdma echo server and two clients on loopback: each
// client sends messages of growing size and checks that they come back.
//
//	go run ./examples/echo [-addr 127.0.0.1:0] [-clients 2] [-n 1000]
//
// The provider is chosen as rdma.Dial chooses it (RDMA_PROVIDER, else an RDMA
// device if one is active, else the software provider).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"time"

	"github.com/rdmanet/rdma"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	clients := flag.Int("clients", 2, "number of clients")
	n := flag.Int("n", 1000, "messages per client")
	flag.Parse()

	ln, err := rdma.Listen("rdma", *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	log.Printf("server: listening on %v", ln.Addr())
	go serve(ln)

	var wg sync.WaitGroup
	errs := make(chan error, *clients)
	start := time.Now()
	for i := 0; i < *clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := client(i, ln.Addr().String(), *n); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	failed := false
	for err := range errs {
		log.Print(err)
		failed = true
	}
	if failed {
		log.Fatal("echo: FAILED")
	}
	log.Printf("echo: %d clients x %d messages echoed in %v", *clients, *n, time.Since(start).Round(time.Millisecond))
}

func serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			log.Printf("server: accepted %v over %s", c.RemoteAddr(), c.(*rdma.Conn).Provider())
			io.Copy(c, c)
		}()
	}
}

func client(id int, addr string, n int) error {
	c, err := rdma.Dial("rdma", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	log.Printf("client %d: connected %v -> %v over %s", id, c.LocalAddr(), c.RemoteAddr(), c.(*rdma.Conn).Provider())
	got := make([]byte, 64<<10)
	for i := 0; i < n; i++ {
		msg := bytes.Repeat([]byte{byte(id), byte(i)}, 1+i%(32<<10))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, got[:len(msg)]); err != nil {
			return err
		}
		if !bytes.Equal(msg, got[:len(msg)]) {
			return fmt.Errorf("message %d came back different", i)
		}
	}
	return nil
}
