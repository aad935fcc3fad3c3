package collectives_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/rdmanet/rdma/collectives"
)

// Four ranks join a group through rank 0's address and sum a vector. In
// a job each rank is a process of its own (often on a host of its own)
// and they agree on rank 0's host:port beforehand; here they are
// goroutines on loopback.
func ExampleJoin() {
	// A loopback port that was free a moment ago, for rank 0.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	root := l.Addr().String()
	l.Close()

	const size = 4
	sums := make([][]float64, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			g, err := collectives.Join(ctx, rank, size, root, nil)
			if err != nil {
				log.Fatal(err)
			}
			defer g.Close()
			send := []float64{float64(rank), 1}
			sums[rank] = make([]float64, len(send))
			if err := collectives.AllReduce(ctx, g, send, sums[rank], collectives.Sum); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	for rank, s := range sums {
		fmt.Println("rank", rank, "sum", s)
	}
	// Output:
	// rank 0 sum [6 4]
	// rank 1 sum [6 4]
	// rank 2 sum [6 4]
	// rank 3 sum [6 4]
}
