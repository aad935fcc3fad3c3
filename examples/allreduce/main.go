// Command allreduce sums a vector across ranks with collectives.AllReduce
// over rdma conns, checks the result and reports the bandwidth.
//
// Several ranks in one process, each on its own loopback address standing in
// for a host (127.0.0.1, 127.0.0.2, ...):
//
//	go run ./examples/allreduce [-n 4] [-count 4194304] [-iters 5]
//
// One rank per process, under any launcher that sets the rank variables
// (cmd/rdmarun, mpirun, srun, torchrun; see collectives.JoinFromEnv):
//
//	go run ./cmd/rdmarun -n 4 -- go run ./examples/allreduce
//
// The provider is chosen as rdma.Dial chooses it (RDMA_PROVIDER, else an RDMA
// device if one is active, else the software provider).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rdmanet/rdma/collectives"
)

func main() {
	n := flag.Int("n", 4, "ranks in this process (ignored under a launcher)")
	count := flag.Int("count", 4<<20, "float32 elements per rank")
	iters := flag.Int("iters", 5, "timed all-reduces")
	timeout := flag.Duration("timeout", 2*time.Minute, "bound on the whole run")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if underLauncher() {
		g, err := collectives.JoinFromEnv(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		err = run(ctx, g, *count, *iters)
		g.Close()
		if err != nil {
			log.Fatalf("rank %d: %v", g.Rank(), err)
		}
		return
	}

	if err := runLocal(ctx, *n, *count, *iters); err != nil {
		log.Fatal(err)
	}
}

// runLocal runs n ranks in this process, rank r on 127.0.0.(r+1).
func runLocal(ctx context.Context, n, count, iters int) error {
	if n < 1 || n > 254 {
		return fmt.Errorf("-n %d: want 1 to 254 ranks", n)
	}
	root, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	groups := make([]*collectives.Group, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := collectives.Bootstrap{LocalAddr: fmt.Sprintf("127.0.0.%d", r+1)}
			g, err := b.Join(ctx, r, n, root)
			if err != nil {
				errs[r] = err
				return
			}
			groups[r] = g
			errs[r] = run(ctx, g, count, iters)
		}()
	}
	wg.Wait()
	// Close every rank at once, as separate processes would.
	for _, g := range groups {
		if g != nil {
			wg.Add(1)
			go func() { defer wg.Done(); g.Close() }()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

func underLauncher() bool {
	for _, v := range []string{"RDMA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// run all-reduces a vector whose element i is rank+i%10 on every rank and
// checks the sums.
func run(ctx context.Context, g *collectives.Group, count, iters int) error {
	r, n := g.Rank(), g.Size()
	send := make([]float32, count)
	for i := range send {
		send[i] = float32(r + i%10)
	}
	recv := make([]float32, count)
	if err := collectives.AllReduce(ctx, g, send, recv, collectives.Sum); err != nil {
		return err
	}
	for i, v := range recv {
		if want := float32(n*(n-1)/2 + n*(i%10)); v != want {
			return fmt.Errorf("element %d is %v, want %v", i, v, want)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := collectives.AllReduce(ctx, g, send, recv, collectives.Sum); err != nil {
			return err
		}
	}
	el := time.Since(start)
	if r == 0 && iters > 0 {
		bytes := float64(4 * count)
		algbw := bytes * float64(iters) / el.Seconds()
		busbw := algbw * 2 * float64(n-1) / float64(n)
		fmt.Printf("allreduce: %d ranks, %d float32 (%.1f MiB) per rank, %d iterations: %.2f ms each, algbw %.2f GB/s, busbw %.2f GB/s; result checked\n",
			n, count, bytes/(1<<20), iters, el.Seconds()*1e3/float64(iters), algbw/1e9, busbw/1e9)
	}
	return nil
}
