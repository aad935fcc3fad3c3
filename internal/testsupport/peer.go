package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// A test that needs a second process (one to kill, to stop, or to put in
// another network namespace) runs its own test binary again as a peer: the
// peer is a function registered under a name, and the re-run binary's
// TestMain (Main) calls it instead of running the tests.

// peerEnv carries the peer's name and arguments to the re-run binary.
const peerEnv = "RDMA_TEST_PEER"

// argSep separates the name and the arguments in peerEnv.
const argSep = "\x1f"

var (
	peersMu sync.Mutex
	peers   = map[string]func(args []string) int{}
)

// RegisterPeer makes run the peer called name: it gets the arguments
// PeerCommand was given and returns the process's exit status. Call it from
// an init function.
func RegisterPeer(name string, run func(args []string) int) {
	peersMu.Lock()
	defer peersMu.Unlock()
	if _, dup := peers[name]; dup {
		panic("testsupport: peer " + name + " registered twice")
	}
	peers[name] = run
}

// Main is a test binary's TestMain: in a peer process it runs the peer and
// exits with its status; otherwise it runs the tests and then checks that
// no goroutine is left behind.
func Main(m *testing.M, opts ...goleak.Option) {
	if v, ok := os.LookupEnv(peerEnv); ok {
		os.Exit(runPeer(v))
	}
	goleak.VerifyTestMain(m, opts...)
}

func runPeer(v string) int {
	parts := strings.Split(v, argSep)
	peersMu.Lock()
	run := peers[parts[0]]
	names := make([]string, 0, len(peers))
	for n := range peers {
		names = append(names, n)
	}
	peersMu.Unlock()
	if run == nil {
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "testsupport: no peer %q in this test binary (it has %v)\n", parts[0], names)
		return 2
	}
	return run(parts[1:])
}

// PeerCommand is a command that runs this test binary as the peer called
// name, with args; its environment is this process's. It is not started.
func PeerCommand(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+strings.Join(append([]string{name}, args...), argSep))
	return cmd
}

// PeerCommandVia is PeerCommand run through a wrapper such as
// "ip netns exec NS": the wrapper's words come first.
func PeerCommandVia(wrapper []string, name string, args ...string) *exec.Cmd {
	peer := PeerCommand(name, args...)
	words := append(wrapper[1:len(wrapper):len(wrapper)], peer.Args...)
	cmd := exec.Command(wrapper[0], words...)
	cmd.Env = peer.Env
	return cmd
}

// StartPeer starts the peer called name with args and extra environment,
// its stderr on this process's; at cleanup it is killed and reaped.
func StartPeer(t testing.TB, name string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := PeerCommand(name, args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting peer %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
