// Command http serves net/http on an rdma Listener and fetches from it with
// an http.Client whose Transport dials over rdma, all on loopback.
//
//	go run ./examples/http [-addr 127.0.0.1:0] [-n 100]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/rdmanet/rdma"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	n := flag.Int("n", 100, "requests")
	flag.Parse()

	ln, err := rdma.Listen("rdma", *addr)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s over rdma\n", r.URL.Query().Get("name"))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	d := &rdma.Dialer{}
	client := &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext}, // asks for "tcp": an alias of "rdma"
		Timeout:   10 * time.Second,
	}
	start := time.Now()
	var last string
	for i := 0; i < *n; i++ {
		resp, err := client.Get(fmt.Sprintf("http://%s/hello?name=req%d", ln.Addr(), i))
		if err != nil {
			log.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			log.Fatalf("request %d: %v %s", i, err, resp.Status)
		}
		last = string(b)
	}
	el := time.Since(start)
	log.Printf("http over rdma: %d requests in %v (%v each); last answer: %q",
		*n, el.Round(time.Millisecond), (el / time.Duration(*n)).Round(time.Microsecond), last)
}
