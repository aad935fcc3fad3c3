package capi_test

import (
	"fmt"
	"log"
	"net"
	"strconv"

	"github.com/rdmanet/rdma/capi"
)

// A server on 127.0.0.1 and a client on 127.0.0.2 exchange a message, then
// run an all-to-all of 8-byte blocks.
func Example() {
	srv, err := capi.Init("127.0.0.1", 0, capi.BufferSize, true) // port 0: any free port
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	p, _ := strconv.Atoi(port)

	cl, err := capi.Init("127.0.0.2", 0, capi.BufferSize, false)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	server, err := cl.ConnectPeer("127.0.0.1", p)
	if err != nil {
		log.Fatal(err)
	}
	client, err := srv.AcceptPeer()
	if err != nil {
		log.Fatal(err)
	}

	if _, err := cl.Send(server, []byte("hello")); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := srv.Recv(client, buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server got %q\n", buf[:n])

	done := make(chan []byte)
	go func() {
		recv := make([]byte, 16)
		if err := cl.SequentialAllToAll([]byte("client\x00\x00"), recv, 8); err != nil {
			log.Fatal(err)
		}
		done <- recv
	}()
	recv := make([]byte, 16)
	if err := srv.SequentialAllToAll([]byte("server\x00\x00"), recv, 8); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server: %q\nclient: %q\n", recv, <-done)
	// Output:
	// server got "hello"
	// server: "server\x00\x00client\x00\x00"
	// client: "server\x00\x00client\x00\x00"
}
