package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rdmanet/rdma/collectives"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// groups joins n ranks over kernel TCP on loopback, in this process.
func groups(t *testing.T, n int) []*collectives.Group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := "127.0.0.1:" + freePort(t)
	gs := make([]*collectives.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := collectives.Bootstrap{TCP: true, Secret: []byte("rdmacoll test")}
			gs[r], errs[r] = b.Join(ctx, r, n, root)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, g := range gs {
			wg.Add(1)
			go func() { defer wg.Done(); g.Close() }()
		}
		wg.Wait()
	})
	return gs
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, port, _ := strings.Cut(l.Addr().String(), ":")
	return port
}

// Every operation at a size that is not a multiple of the block, with
// -check: the results are right and the lines carry the rounded size.
func TestMeasureChecksEveryOperation(t *testing.T) {
	for _, n := range []int{2, 3} {
		gs := groups(t, n)
		o := &options{iters: 3, warmup: 1, check: true}
		results := make([][]result, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := newBench(g, o)
				for _, op := range allOps {
					for _, size := range []int{1000, 70 << 10} {
						res, err := b.measure(context.Background(), op, size)
						if err != nil {
							errs[r] = err
							return
						}
						results[r] = append(results[r], res)
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		for _, res := range results[0] {
			assert.Positive(t, res.median, res.line())
			assert.Equal(t, effectiveSize(res.op, res.size, n), res.size)
			assert.Contains(t, res.line(), " ok")
		}
		assert.Equal(t, 1000/(4*n)*4*n, results[0][4].size, "allgather's size is whole words per rank")
	}
}

// A wrong result is caught by the check: the operation's verify rejects a
// result that differs in one element.
func TestVerifyCatchesOneWrongElement(t *testing.T) {
	gs := groups(t, 2)
	for _, op := range allOps {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := newBench(g, &options{iters: 1, check: true})
				runOp, prepare, verify := b.operation(context.Background(), op, 4096)
				prepare(5)
				if errs[r] = runOp(); errs[r] != nil {
					return
				}
				if errs[r] = verify(5); errs[r] != nil {
					return
				}
				// One byte of the result changed.
				switch op {
				case "allreduce":
					b.f32r[1000]++
				default:
					b.recv[2047]++
				}
				if verify(5) == nil {
					errs[r] = assert.AnError
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			assert.NoError(t, err, "%s on rank %d", op, r)
		}
	}
}

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	m1 := write("m1", "# collmpi\nallreduce 4096 2.00 1 1 ok\nalltoall 4096 10.0 1 1 ok\n")
	m2 := write("m2", "allreduce 4096 4.00 1 1 ok\nalltoall 4096 30.0 1 1 ok\n")
	m3 := write("m3", "allreduce 4096 3.00 1 1 ok\n")
	r1 := write("r1", "[1,0]<stdout>: noise\nallreduce 4096 9.00 1 1 ok\nbroadcast 4096 1 1 1 ok\n")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-compare", m1 + "," + m2 + "," + m3, r1}, &out, &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String()) // two comment lines, allreduce only
	assert.Equal(t, []string{"allreduce", "4096", "3.00", "9.00", "3.00", "3/1"}, strings.Fields(lines[2]))

	out.Reset()
	assert.ErrorContains(t, run(context.Background(), []string{"-compare", m1, write("r2", "broadcast 8 1 1 1 ok\n")}, &out, &out),
		"no operation and size in both")
}

func TestParseOptions(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseOptions([]string{"-sizes", "4K,1M,100", "-ops", "allreduce,alltoall", "-check"}, &errOut)
	require.NoError(t, err)
	assert.Equal(t, []int{4096, 1 << 20, 100}, o.sizes)
	assert.Equal(t, []string{"allreduce", "alltoall"}, o.ops)
	assert.True(t, o.check)
	for _, bad := range [][]string{{"-ops", "reduce"}, {"-sizes", "4X"}, {"-sizes", "0"}, {"-iters", "0"}, {"extra"}} {
		_, err := parseOptions(bad, &errOut)
		assert.Error(t, err, "%q", bad)
	}
	err = run(context.Background(), []string{"-iters", "1"}, &errOut, &errOut)
	if os.Getenv("RDMA_RANK") == "" && os.Getenv("OMPI_COMM_WORLD_RANK") == "" {
		assert.ErrorContains(t, err, "no rank in the environment")
	}
}

// -runs prints every timed run's time on rank 0, one line per operation and
// size, besides the median.
func TestRunsPrintsEveryRun(t *testing.T) {
	o, err := parseOptions([]string{"-runs", "-iters", "4"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.NotNil(t, o.runs)
	gs := groups(t, 2)
	var out bytes.Buffer
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, g := range gs {
		opts := *o
		opts.runs = &out
		if r != 0 {
			opts.runs = nil // rank 0 prints; another writer would race
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = newBench(g, &opts).measure(context.Background(), "allreduce", 4096)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	line := strings.TrimSpace(out.String())
	require.True(t, strings.HasPrefix(line, "# allreduce 4096: "), line)
	times := strings.Fields(line[strings.LastIndex(line, ":")+1:])
	require.Len(t, times, 4, line)
	for _, v := range times {
		us, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err, line)
		assert.Positive(t, us, line)
	}
}
