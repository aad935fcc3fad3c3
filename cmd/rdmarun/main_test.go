package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmanet/rdma/collectives"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

const childEnv = "RDMARUN_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// child is one rank started by rdmarun: it joins from the environment and
// prints the group's sum of ranks; in mode "fail", rank 1 exits with 7 after
// a first barrier and the others wait for it in a second one.
func child(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := collectives.JoinFromEnv(ctx, nil)
	if err != nil {
		fmt.Println("join:", err)
		return 1
	}
	defer g.Close()
	if mode == "fail" {
		// A first barrier so every rank has finished joining before rank 1
		// dies: the survivors then fail in the second one, not in Join.
		if err := g.Barrier(ctx); err != nil {
			fmt.Println("first barrier:", err)
			return 1
		}
		if g.Rank() == 1 {
			os.Exit(7)
		}
		if err := g.Barrier(ctx); err != nil {
			fmt.Println("barrier:", err)
			return 1
		}
		return 0
	}
	v := []int64{int64(g.Rank())}
	if err := collectives.AllReduce(ctx, g, v, v, collectives.Sum); err != nil {
		fmt.Println("allreduce:", err)
		return 1
	}
	// The job secret, which every rank must have had to join: not printed,
	// only its hash, to compare.
	secret := os.Getenv(collectives.SecretEnv)
	fmt.Printf("local=%s sum=%d secret=%d:%x\n", os.Getenv("RDMA_LOCAL_ADDR"), v[0], len(secret), sha256.Sum256([]byte(secret)))
	return 0
}

func TestRunsEveryRank(t *testing.T) {
	t.Setenv(childEnv, "ok")
	var out, errOut bytes.Buffer
	status := run([]string{"-n", "3", "-hosts", "127.0.0.1,127.0.0.2", "--", os.Args[0], "-test.run=^$"}, &out, &errOut)
	require.Equal(t, 0, status, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3, out.String())
	secrets := map[string]bool{}
	for i, l := range lines {
		l, secret, ok := strings.Cut(l, " secret=")
		require.True(t, ok, l)
		secrets[secret] = true
		lines[i] = l
	}
	require.ElementsMatch(t, []string{
		"[0] local=127.0.0.1 sum=3",
		"[1] local=127.0.0.2 sum=3",
		"[2] local=127.0.0.1 sum=3",
	}, lines)
	// One secret for the job, made up by rdmarun: 32 random bytes in hex.
	require.Len(t, secrets, 1)
	for s := range secrets {
		require.True(t, strings.HasPrefix(s, "64:"), "secret %s", s)
	}
}

// A secret in rdmarun's environment is the job's.
func TestKeepsTheCallersSecret(t *testing.T) {
	t.Setenv(childEnv, "ok")
	t.Setenv(collectives.SecretEnv, "mine")
	var out, errOut bytes.Buffer
	status := run([]string{"-n", "2", "--", os.Args[0], "-test.run=^$"}, &out, &errOut)
	require.Equal(t, 0, status, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	want := fmt.Sprintf("secret=4:%x", sha256.Sum256([]byte("mine")))
	require.Equal(t, 2, strings.Count(out.String(), want), out.String())
}

func TestFailingRank(t *testing.T) {
	t.Setenv(childEnv, "fail")
	var out, errOut bytes.Buffer
	status := run([]string{"-n", "3", "-grace", "20s", "--", os.Args[0], "-test.run=^$"}, &out, &errOut)
	// The status is the first failure rdmarun saw: rank 1's 7, or a
	// survivor's 1 when the survivor was reaped first.
	require.Contains(t, []int{1, 7}, status, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Contains(t, errOut.String(), "rdmarun: rank 1: exit status 7")
	// The survivors fail (they do not hang) and name the dead rank.
	require.Contains(t, out.String(), "[0] barrier:", "stderr:\n%s", errOut.String())
	require.Contains(t, out.String(), "[2] barrier:")
	require.Contains(t, out.String(), "rank 1")
	require.NotContains(t, errOut.String(), "killing")
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"-n", "2"}, &out, &errOut))
	require.Contains(t, errOut.String(), "usage")
}
