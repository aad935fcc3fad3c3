package rdma_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/rdmanet/rdma"
)

// Listen and Dial give a net.Listener and a net.Conn: here an echo
// server and a client on loopback.
func Example() {
	ln, err := rdma.Listen("rdma", "127.0.0.1:0") // a net.Listener
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		_, _ = io.Copy(s, s) // echo until the client closes its side
	}()

	c, err := rdma.Dial("rdma", ln.Addr().String()) // a net.Conn
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("hello over rdma"))
	_ = c.(*rdma.Conn).CloseWrite()
	reply, _ := io.ReadAll(c)
	fmt.Println(string(reply))
	// Output: hello over rdma
}

// A Dialer's DialContext carries net/http (or gRPC, yamux, TLS) over
// RDMA: here an http.Server on an rdma Listener and a client whose
// Transport dials through rdma.
func ExampleDialer_DialContext() {
	ln, err := rdma.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s over %s", r.Method, r.URL.Path, r.Context().Value(http.LocalAddrContextKey).(net.Addr).Network())
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	tr := &http.Transport{DialContext: (&rdma.Dialer{}).DialContext} // "tcp" is an alias of "rdma"
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/hello")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output: GET /hello over rdma
}

// A Write of a large Buffer is not copied: the peer RDMA READs it where
// it lies, into its own Buffer (a rendezvous), and the Write returns once
// it has. So the reader must be reading: two ends that both Write a
// Buffer before reading wait for each other for ever.
func ExampleAllocBuffer() {
	ln, err := rdma.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	const size = 1 << 20
	received := make(chan []byte, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			received <- nil
			return
		}
		defer s.Close()
		in, err := rdma.AllocBuffer(size) // the peer reads straight into it
		if err != nil {
			received <- nil
			return
		}
		defer in.Free()
		_, err = io.ReadFull(s, in.Bytes())
		received <- bytes.Clone(in.Bytes()[:8])
		_ = err
	}()

	c, err := rdma.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	out, err := rdma.AllocBuffer(size) // reuse Buffers: making one costs (rdma.NewBufferPool)
	if err != nil {
		log.Fatal(err)
	}
	defer out.Free()
	copy(out.Bytes(), "rdma-zc!")
	if _, err := c.Write(out.Bytes()); err != nil { // returns once the peer has read it
		log.Fatal(err)
	}
	fmt.Printf("peer got %q\n", <-received)
	fmt.Println("rendezvous transfers:", c.(*rdma.Conn).Stats().RendezvousSent)
	// Output:
	// peer got "rdma-zc!"
	// rendezvous transfers: 1
}

// One-sided operations: one side exposes a range of a Buffer and sends
// its Desc; the other writes into it with WriteRemoteNotify, and the
// exposing side's WaitNotify returns once the bytes have landed, without
// it taking part in the transfer.
func ExampleConn_Expose() {
	ln, err := rdma.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	done := make(chan string, 1)
	go func() {
		s, err := ln.(*rdma.Listener).AcceptRDMA()
		if err != nil {
			done <- err.Error()
			return
		}
		defer s.Close()
		target, err := rdma.AllocBuffer(4096)
		if err != nil {
			done <- err.Error()
			return
		}
		defer target.Free()
		d, err := s.Expose(target, 0, 4096, rdma.AccessWrite)
		if err != nil {
			done <- err.Error()
			return
		}
		defer s.Unexpose(d)
		_, _ = s.Write(d[:]) // the Desc is 32 bytes: send it any way
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		value, n, err := s.WaitNotify(ctx)
		if err != nil {
			done <- err.Error()
			return
		}
		done <- fmt.Sprintf("notified %d: %d bytes: %s", value, n, target.Bytes()[:n])
	}()

	conn, err := rdma.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	c := conn.(*rdma.Conn)
	defer c.Close()
	var d rdma.Desc
	if _, err := io.ReadFull(c, d[:]); err != nil {
		log.Fatal(err)
	}
	src, err := rdma.AllocBuffer(4096)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Free()
	n := copy(src.Bytes(), "written by the peer")
	if err := c.WriteRemoteNotify(d, 0, src.Bytes()[:n], 7); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-done)
	// Output: notified 7: 19 bytes: written by the peer
}

// Every connection counts what it does (always on, free on the data
// path); OpenConnStats lists the open ones, and package rdmadebug serves
// them as a debug page.
func ExampleConn_Stats() {
	ln, err := rdma.Listen("rdma", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		_, _ = io.Copy(io.Discard, s)
	}()
	conn, err := rdma.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	c := conn.(*rdma.Conn)
	defer c.Close()
	for range 3 {
		_, _ = c.Write(make([]byte, 1000))
	}
	s := c.Stats()
	fmt.Println("bytes sent:", s.BytesSent, "in", s.Writes, "writes")
	fmt.Println("provider:", s.Provider == c.Provider(), "path set:", s.Path != "")
	for _, o := range rdma.OpenConnStats() {
		if o.LocalAddr == c.LocalAddr().String() {
			fmt.Println("listed, with an id:", o.ID != 0)
		}
	}
	// Output:
	// bytes sent: 3000 in 3 writes
	// provider: true path set: true
	// listed, with an id: true
}
