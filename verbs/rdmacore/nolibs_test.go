//go:build cgo && linux

package rdmacore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/testsupport"
)

// A program that imports the module builds with cgo, and runs on the soft
// provider, on a machine without rdma-core's headers and libraries. The test
// makes such a machine out of this one: in a private mount namespace,
// testdata/hide-rdma-core.sh hides them, then the test builds
// testdata/nolibs (a module that requires this one through a replace
// directive, offline from the module cache) and runs it: it must echo over
// soft and say why, and with RDMA_PROVIDER=rdmacore it must fail saying
// which library is missing and how to use soft.
func TestBuildWithoutRDMACore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program: not in -short")
	}
	if testsupport.InVM() {
		t.Skip("runs on the build host: the Soft-RoCE guest has neither the go command nor this package's sources")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, for a mount namespace that hides rdma-core's headers and libraries (CI runs as root)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare(1) from util-linux to hide rdma-core in a mount namespace")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command in PATH to build a program")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	hide, err := filepath.Abs("testdata/hide-rdma-core.sh")
	require.NoError(t, err)
	src, err := os.ReadFile("testdata/nolibs/main.go")
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), src, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))
	gomod := fmt.Sprintf("module example.com/nolibs\n\ngo 1.26\n\nrequire github.com/rdmanet/rdma v0.0.0\n\n"+
		"replace github.com/rdmanet/rdma => %s\n", root)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644))

	hidden := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", hide}, args...)...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}

	// The cache of compiled packages does not know about system headers: a
	// CGO_CFLAGS of this run's own makes every cgo package compile again,
	// here, where the headers are gone.
	bin := filepath.Join(mod, "nolibs")
	build := hidden([]string{"CGO_ENABLED=1", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off",
		fmt.Sprintf("CGO_CFLAGS=-O2 -g -DRDMACORE_NOLIBS_CHECK=%d", time.Now().UnixNano())},
		goBin, "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build without rdma-core's headers and libraries:\n%s", out)

	// The headers were really gone: a program that includes one fails.
	probe := hidden(nil, "sh", "-c", "echo '#include <infiniband/verbs.h>' | cc -fsyntax-only -x c -")
	out, err = probe.CombinedOutput()
	require.Error(t, err, "verbs.h is still visible where it should be hidden:\n%s", out)

	out, err = hidden(nil, bin).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("auto:\n%s", out)
	assert.Contains(t, string(out), `echo "ping" over soft`)
	assert.Contains(t, string(out), "fell back to soft: rdmacore: rdma-core's libraries could not be loaded")
	assert.Contains(t, string(out), "libibverbs.so.1: cannot open shared object file")

	out, err = hidden([]string{"RDMA_PROVIDER=rdmacore"}, bin).CombinedOutput()
	require.Error(t, err, "RDMA_PROVIDER=rdmacore without rdma-core must fail:\n%s", out)
	t.Logf("RDMA_PROVIDER=rdmacore:\n%s", out)
	msg := string(out)
	assert.True(t, strings.HasPrefix(msg, "listen: "), "%s", msg)
	assert.Contains(t, msg, "RDMA_PROVIDER=rdmacore, but rdmacore: rdma-core's libraries could not be loaded")
	assert.Contains(t, msg, "libibverbs.so.1: cannot open shared object file")
	assert.Contains(t, msg, "libibverbs1 librdmacm1")
	assert.Contains(t, msg, "set RDMA_PROVIDER=soft")
}
