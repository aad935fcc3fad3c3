// Command rdmarun starts one process per rank of a collectives group, as
// mpirun does: each gets RDMA_RANK, RDMA_WORLD_SIZE and RDMA_ROOT_ADDR (and
// RDMA_LOCAL_ADDR with -hosts), which collectives.JoinFromEnv reads, and
// RDMA_JOB_SECRET: the job secret every rank must prove it holds to join,
// made up at random for each run unless rdmarun's own environment has one.
//
//	rdmarun -n 4 [-root 127.0.0.1:29500] [-hosts 127.0.0.1,127.0.0.2] -- prog [args...]
//
// Output lines are prefixed with the rank. When a rank fails, the others
// are given -grace to fail too (they will: collectives makes every rank of a
// broken group fail), then killed. The exit status is the first failing
// rank's, or 0.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/collectives"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rdmarun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 2, "number of ranks")
	root := fs.String("root", "", "rank 0's listen address (default: a free port on the first host)")
	hosts := fs.String("hosts", "127.0.0.1", "comma-separated IPs; rank r listens on and dials from hosts[r % len(hosts)]")
	grace := fs.Duration("grace", 5*time.Second, "how long the other ranks get to exit after one fails")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rdmarun [-n ranks] [-root host:port] [-hosts ip,ip,...] -- prog [args...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	prog := fs.Args()
	if len(prog) == 0 || *n < 1 {
		fs.Usage()
		return 2
	}
	hostList := strings.Split(*hosts, ",")
	if *root == "" {
		a, err := freeAddr(hostList[0])
		if err != nil {
			fmt.Fprintln(stderr, "rdmarun:", err)
			return 1
		}
		*root = a
	}

	secret := os.Getenv(collectives.SecretEnv)
	if secret == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			fmt.Fprintln(stderr, "rdmarun: job secret:", err)
			return 1
		}
		secret = hex.EncodeToString(b[:])
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var outMu sync.Mutex
	cmds := make([]*exec.Cmd, *n)
	var copiers sync.WaitGroup
	var writeEnds []*os.File // the children's ends of the output pipes
	for r := range cmds {
		cmd := exec.Command(prog[0], prog[1:]...)
		cmd.Env = append(os.Environ(),
			"RDMA_RANK="+strconv.Itoa(r),
			"RDMA_WORLD_SIZE="+strconv.Itoa(*n),
			"RDMA_ROOT_ADDR="+*root,
			"RDMA_LOCAL_ADDR="+hostList[r%len(hostList)],
			collectives.SecretEnv+"="+secret,
		)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// Our own pipes, not StdoutPipe: Wait closes those as soon as the
		// rank exits, which can drop its last lines before they are copied.
		// These are read to EOF; the write ends close after Start below.
		for _, w := range []struct {
			dst  io.Writer
			into *io.Writer
		}{{stdout, &cmd.Stdout}, {stderr, &cmd.Stderr}} {
			pr, pw, err := os.Pipe()
			if err != nil {
				fmt.Fprintf(stderr, "rdmarun: %v\n", err)
				return 1
			}
			*w.into = pw
			writeEnds = append(writeEnds, pw)
			copiers.Add(1)
			go func() {
				defer copiers.Done()
				defer pr.Close()
				prefixLines(pr, w.dst, fmt.Sprintf("[%d] ", r), &outMu)
			}()
		}
		cmds[r] = cmd
	}
	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, *n)
	started := 0
	for r, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(stderr, "rdmarun: rank %d: %v\n", r, err)
			for _, c := range cmds[:started] {
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
			break
		}
		started++
		go func() { exits <- exit{r, cmd.Wait()} }()
	}
	// The children hold their own copies now: closing ours lets each copier
	// see EOF once its rank (and anything it started) has exited.
	for _, w := range writeEnds {
		w.Close()
	}
	alive := make([]bool, len(cmds))
	for r := 0; r < started; r++ {
		alive[r] = true
	}
	status := 0
	var killTimer <-chan time.Time
	if started < *n {
		status = 1
	}
	for left := started; left > 0; {
		select {
		case e := <-exits:
			left--
			alive[e.rank] = false
			if e.err != nil {
				// Every failure is reported; the exit status is the first
				// one seen (survivors of a dead rank may be reaped first).
				fmt.Fprintf(stderr, "rdmarun: rank %d: %v\n", e.rank, e.err)
			}
			if e.err != nil && status == 0 {
				status = 1
				var ee *exec.ExitError
				if errors.As(e.err, &ee) && ee.ExitCode() > 0 {
					status = ee.ExitCode()
				}
				killTimer = time.After(*grace)
			}
		case <-killTimer:
			fmt.Fprintf(stderr, "rdmarun: killing the ranks still running %v after a failure\n", *grace)
			signalAll(cmds, alive, syscall.SIGKILL)
			killTimer = nil
		case <-ctx.Done():
			signalAll(cmds, alive, syscall.SIGTERM)
			if status == 0 {
				status = 130
			}
			killTimer = time.After(*grace)
			ctx = context.Background()
		}
	}
	copiers.Wait()
	return status
}

func freeAddr(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func prefixLines(r io.Reader, w io.Writer, prefix string, mu *sync.Mutex) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mu.Lock()
		fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
		mu.Unlock()
	}
}

// signalAll signals the process group of every rank still running.
func signalAll(cmds []*exec.Cmd, alive []bool, sig syscall.Signal) {
	for r, c := range cmds {
		if alive[r] {
			_ = syscall.Kill(-c.Process.Pid, sig)
		}
	}
}
