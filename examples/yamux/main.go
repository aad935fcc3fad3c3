// Command yamux runs hashicorp/yamux, unchanged, over one rdma connection on
// loopback: several streams in parallel, each echoed by the server.
//
//	go run ./examples/yamux [-addr 127.0.0.1:0] [-streams 8] [-size 1048576]
package main

import (
	"bytes"
	"crypto/rand"
	"flag"
	"io"
	"log"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/rdmanet/rdma"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	streams := flag.Int("streams", 8, "streams to open")
	size := flag.Int("size", 1<<20, "bytes per stream, each way")
	flag.Parse()

	ln, err := rdma.Listen("rdma", *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		sess, err := yamux.Server(c, nil)
		if err != nil {
			log.Fatal(err)
		}
		for {
			st, err := sess.Accept()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				io.Copy(st, st)
			}()
		}
	}()

	c, err := rdma.Dial("rdma", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	sess, err := yamux.Client(c, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < *streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, err := sess.Open()
			if err != nil {
				log.Fatal(err)
			}
			defer st.Close()
			want := make([]byte, *size)
			rand.Read(want)
			go st.Write(want)
			got := make([]byte, *size)
			if _, err := io.ReadFull(st, got); err != nil {
				log.Fatalf("stream %d: %v", i, err)
			}
			if !bytes.Equal(want, got) {
				log.Fatalf("stream %d: data differs", i)
			}
		}(i)
	}
	wg.Wait()
	el := time.Since(start)
	log.Printf("yamux over rdma (%s): %d streams x %d bytes each way in %v (%.0f MB/s both ways)",
		c.(*rdma.Conn).Provider(), *streams, *size, el.Round(time.Millisecond),
		float64(2**streams**size)/el.Seconds()/1e6)
}
