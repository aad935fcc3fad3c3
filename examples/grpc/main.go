// Command grpc serves gRPC (the standard health service) on an rdma Listener
// and calls it through grpc.WithContextDialer, on loopback.
//
//	go run ./examples/grpc [-addr 127.0.0.1:0] [-n 100]
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rdmanet/rdma"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	n := flag.Int("n", 100, "calls")
	flag.Parse()

	ln, err := rdma.Listen("rdma", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("example", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	defer srv.Stop()

	var d rdma.Dialer
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	start := time.Now()
	var resp *healthpb.HealthCheckResponse
	for i := 0; i < *n; i++ {
		if resp, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "example"}); err != nil {
			log.Fatal(err)
		}
	}
	el := time.Since(start)
	log.Printf("grpc over rdma: %d health checks in %v (%v each): %v",
		*n, el.Round(time.Millisecond), (el / time.Duration(*n)).Round(time.Microsecond), resp.Status)
}
