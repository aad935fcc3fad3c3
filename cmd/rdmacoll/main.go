// Command rdmacoll measures the collectives package as nccl-tests and the
// OSU micro-benchmarks measure MPI: for each operation (allreduce,
// broadcast, allgather, alltoall) and size it prints the median time of
// -iters runs after -warmup runs, each started by a barrier, the slowest
// rank's time counting for each run, with the algorithm bandwidth (size /
// time) and the bus bandwidth (algbw scaled as nccl-tests does: 2(n-1)/n for
// allreduce, 1 for broadcast, (n-1)/n for allgather and alltoall).
//
// Every rank runs it under a launcher that collectives.JoinFromEnv reads
// (mpirun, srun, torchrun, rdmarun), RDMA_ROOT_ADDR naming rank 0's address:
//
//	mpirun -n 2 -x RDMA_ROOT_ADDR=127.0.0.1:29500 rdmacoll -check
//	rdmarun -n 4 -- rdmacoll -sizes 4K,256K,4M,16M
//
// Sizes follow nccl-tests: allreduce and broadcast move a buffer of the
// size, allgather's size is the gathered result, alltoall's each rank's send
// buffer. With -check every element of every result is verified after each
// run (outside the timed part). Rank 0 prints one line per operation and
// size, in the same columns as the Open MPI program beside it
// (cmd/rdmacoll/mpi/collmpi.c), and -compare reads both programs' outputs
// and prints the ratio of their times:
//
//	rdmacoll -compare mpi1.txt,mpi2.txt rdma1.txt,rdma2.txt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/collectives"
	"github.com/rdmanet/rdma/internal/cmdmain"
)

func main() { cmdmain.Run("rdmacoll", run) }

type options struct {
	ops       []string
	sizes     []int
	iters     int
	warmup    int
	check     bool
	tcp       bool
	provider  string
	timeout   time.Duration
	compare   [2]string
	runs      io.Writer // every run's time goes here too (-runs), or nil
	isCompare bool
}

var allOps = []string{"allreduce", "broadcast", "allgather", "alltoall"}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("rdmacoll", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	ops := fs.String("ops", strings.Join(allOps, ","), "comma-separated operations: "+strings.Join(allOps, ", "))
	sizes := fs.String("sizes", "4K,256K,4M,16M", "comma-separated sizes in bytes (suffixes K, M)")
	fs.IntVar(&o.iters, "iters", 20, "timed runs per operation and size (the median is printed)")
	fs.IntVar(&o.warmup, "warmup", 3, "untimed runs before the timed ones")
	fs.BoolVar(&o.check, "check", false, "verify every element of every result")
	fs.BoolVar(&o.tcp, "tcp", false, "carry the group over kernel TCP (Bootstrap.TCP) instead of rdma conns")
	fs.StringVar(&o.provider, "provider", "", "rdma provider (rdma.Config.Provider; \"\" is the default)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole run, Join included")
	runs := fs.Bool("runs", false, "also print every timed run's time (rank 0, to stderr), not only the median")
	cmp := fs.String("compare", "", "base files (comma-separated): print the ratio of the result files given as the argument to these; no group is joined")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *cmp != "" {
		if fs.NArg() != 1 {
			return nil, errors.New("-compare BASE[,BASE...] takes one argument: the result files to compare, comma-separated")
		}
		o.isCompare = true
		o.compare = [2]string{*cmp, fs.Arg(0)}
		return o, nil
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *runs {
		o.runs = stderr
	}
	for _, op := range strings.Split(*ops, ",") {
		if !slices.Contains(allOps, op) {
			return nil, fmt.Errorf("-ops: unknown operation %q (want %s)", op, strings.Join(allOps, ", "))
		}
		o.ops = append(o.ops, op)
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := parseSize(s)
		if err != nil {
			return nil, fmt.Errorf("-sizes: %w", err)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.iters < 1 || o.warmup < 0 {
		return nil, fmt.Errorf("-iters %d, -warmup %d: want iters >= 1 and warmup >= 0", o.iters, o.warmup)
	}
	return o, nil
}

// parseSize reads "4096", "4K" or "16M" (binary multiples).
func parseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	mul := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > (1<<31)/mul {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mul, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.isCompare {
		return compareFiles(o.compare[0], o.compare[1], stdout)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var g *collectives.Group
	if o.tcp {
		g, err = joinFromEnvTCP(ctx)
	} else {
		g, err = collectives.JoinFromEnv(ctx, &rdma.Config{Provider: o.provider})
	}
	if err != nil {
		return err
	}
	defer g.Close()
	transport := "rdma"
	if o.tcp {
		transport = "tcp"
	} else if o.provider != "" {
		transport = "rdma/" + o.provider
	}
	b := newBench(g, o)
	if g.Rank() == 0 {
		fmt.Fprintf(stdout, "# rdmacoll: %d ranks, transport %s, median of %d after %d warm-ups, a barrier before each, check %v\n",
			g.Size(), transport, o.iters, o.warmup, o.check)
		fmt.Fprintln(stdout, header)
	}
	for _, op := range o.ops {
		for _, size := range o.sizes {
			res, err := b.measure(ctx, op, size)
			if err != nil {
				return fmt.Errorf("%s %d bytes: %w", op, size, err)
			}
			if g.Rank() == 0 {
				fmt.Fprintln(stdout, res.line())
			}
		}
	}
	return nil
}

// joinFromEnvTCP is JoinFromEnv over kernel TCP: the same variables, read
// by a Bootstrap with TCP set.
func joinFromEnvTCP(ctx context.Context) (*collectives.Group, error) {
	rank, size, root, err := rankFromEnv()
	if err != nil {
		return nil, err
	}
	b := collectives.Bootstrap{TCP: true, LocalAddr: os.Getenv("RDMA_LOCAL_ADDR")}
	return b.Join(ctx, rank, size, root)
}

// rankFromEnv reads the variables of the launchers JoinFromEnv knows.
func rankFromEnv() (rank, size int, root string, err error) {
	for _, v := range [][2]string{
		{"RDMA_RANK", "RDMA_WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		{"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}, {"RANK", "WORLD_SIZE"},
	} {
		rs, ss := os.Getenv(v[0]), os.Getenv(v[1])
		if rs == "" {
			continue
		}
		if rank, err = strconv.Atoi(rs); err != nil {
			return 0, 0, "", fmt.Errorf("%s=%q: %w", v[0], rs, err)
		}
		if size, err = strconv.Atoi(ss); err != nil {
			return 0, 0, "", fmt.Errorf("%s=%q: %w", v[1], ss, err)
		}
		root = os.Getenv("RDMA_ROOT_ADDR")
		if root == "" && os.Getenv("MASTER_ADDR") != "" {
			root = os.Getenv("MASTER_ADDR") + ":" + os.Getenv("MASTER_PORT")
		}
		return rank, size, root, nil
	}
	return 0, 0, "", errors.New("no rank in the environment: start rdmacoll with mpirun, srun, torchrun or rdmarun")
}
