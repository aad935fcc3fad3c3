//go:build cgo && linux

package rdmacore

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// rdmacore_abi.h declares, from the stable ABI, what rdma-core's headers
// declare: every size, offset and constant the package relies on must be the
// same as theirs. testdata/abi_layout.c prints them; it is compiled once
// against each header and the outputs compared line by line.
func TestABILayout(t *testing.T) {
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		if _, err := os.Stat(h); err != nil {
			t.Skipf("rdma-core's headers are not installed (%s; `make deps` installs libibverbs-dev and librdmacm-dev "+
				"for this check): nothing to compare rdmacore_abi.h with", h)
		}
	}
	cc, err := exec.LookPath("cc")
	require.NoError(t, err, "a C compiler is needed to check the ABI layout")
	dir := t.TempDir()
	run := func(name string, defines ...string) []string {
		bin := filepath.Join(dir, name)
		args := append([]string{"-std=gnu11", "-Wall", "-Werror", "-I.", "-o", bin}, defines...)
		out, err := exec.Command(cc, append(args, "testdata/abi_layout.c")...).CombinedOutput()
		require.NoError(t, err, "cc %s: %s", name, out)
		out, err = exec.Command(bin).Output()
		require.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	ours := run("ours")
	theirs := run("rdma-core", "-DRDMA_CORE_HEADERS")
	require.Len(t, ours, len(theirs))
	require.Greater(t, len(ours), 100, "the layout program printed too little")
	for i := range ours {
		assert.Equal(t, theirs[i], ours[i], "rdmacore_abi.h differs from rdma-core's headers")
	}
}

// The package links neither libibverbs nor librdmacm: a program that imports
// it starts on a machine without them, and loads them only when asked to.
func TestNoLinkToRDMACore(t *testing.T) {
	f, err := elf.Open(os.Args[0])
	require.NoError(t, err)
	defer f.Close()
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.NotEmpty(t, libs, "the test binary is not dynamically linked: the check means nothing")
	for _, l := range libs {
		assert.NotContains(t, l, "libibverbs", "the binary needs %s at start-up", l)
		assert.NotContains(t, l, "librdmacm", "the binary needs %s at start-up", l)
	}
	t.Logf("needed: %v", libs)
}

// load reports a missing library or symbol as a verbs.ErrNoDevice that names
// it, and leaves the entry points alone.
func TestLoadErrors(t *testing.T) {
	err := load([]string{"libibverbs-missing.so.1"})
	require.NotNil(t, err)
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.Contains(t, err.Error(), "libibverbs-missing.so.1")
	assert.Contains(t, err.Error(), "libibverbs1 librdmacm1")

	// Libraries that are there but are not rdma-core's: the first entry
	// point is missing.
	err = load([]string{"libc.so.6", "libc.so.6"})
	require.NotNil(t, err)
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.Contains(t, err.Error(), "libc.so.6 lacks ibv_get_device_list@IBVERBS_1.1")

	// What the package loads here, where rdma-core's libraries are installed.
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err == nil {
		assert.NoError(t, Available())
	}
}
