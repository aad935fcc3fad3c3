package testsupport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func init() {
	RegisterPeer("args", func(args []string) int {
		fmt.Printf("%q\n", args)
		return 7
	})
}

// The re-run binary runs the named peer with its arguments, spaces and all,
// and exits with the peer's status.
func TestPeerCommand(t *testing.T) {
	out, err := PeerCommand("args", "a b", "", "c").Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("exit: %v, want status 7", err)
	}
	if got, want := strings.TrimSpace(string(out)), `["a b" "" "c"]`; got != want {
		t.Fatalf("peer got %s, want %s", got, want)
	}
}

// A name no peer is registered under is an error that lists the ones there
// are, not a run of the tests.
func TestUnknownPeer(t *testing.T) {
	out, err := PeerCommand("nonesuch").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2\n%s", err, out)
	}
	if !strings.Contains(string(out), `no peer "nonesuch"`) || !strings.Contains(string(out), "args") {
		t.Fatalf("output: %s", out)
	}
}

// Connect gives the two ends of one conn; Serves sees an echo server.
func TestConnectAndServes(t *testing.T) {
	c, s := TCP(t, "")
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v", b, err)
	}
	if c.LocalAddr().String() != s.RemoteAddr().String() {
		t.Fatalf("ends %v and %v are not one conn", c.LocalAddr(), s.RemoteAddr())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	Serves(t, ln, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) })
}
