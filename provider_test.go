package rdma

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/provider"
	"github.com/rdmanet/rdma/verbs"
)

// The public Provider names and ProviderEnv are the ones the choice reads.
func TestProviderNamesAreTheChoices(t *testing.T) {
	assert.Equal(t, provider.Env, ProviderEnv)
	assert.Equal(t, []string{provider.Soft, provider.RDMACore, provider.Auto}, []string{ProviderSoft, ProviderRDMACore, ProviderAuto})
}

func TestProviderChoice(t *testing.T) {
	t.Setenv(ProviderEnv, "soft")
	p, err := chooseProvider("")
	require.NoError(t, err)
	assert.Equal(t, "soft", p.Name())

	// auto: rdmacore where the kernel shows an active RDMA port (and this
	// build has the rdmacore provider), else soft. The kernel's word comes
	// from sysfs, not from the provider code under test.
	t.Setenv(ProviderEnv, "")
	p, err = chooseProvider("auto")
	require.NoError(t, err)
	want := ProviderSoft
	if _, err := verbs.Lookup(ProviderRDMACore); err == nil && activePortInSysfs(t) {
		want = ProviderRDMACore
	}
	assert.Equal(t, want, p.Name())

	_, err = chooseProvider("nonesuch")
	assert.Error(t, err)
}

// RDMA_PROVIDER=rdmacore on a machine without a device: a clear error that
// says so and how to use the software provider.
func TestRDMACoreWithoutDevice(t *testing.T) {
	if activePortInSysfs(t) {
		t.Skip("this machine has an active RDMA device")
	}
	t.Setenv(ProviderEnv, "rdmacore")
	_, err := Dial("rdma", "127.0.0.1:1")
	require.Error(t, err)
	var oe *net.OpError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "dial", oe.Op)
	msg := err.Error()
	assert.True(t, strings.Contains(msg, "RDMA_PROVIDER=soft"), msg)
	assert.True(t, strings.Contains(msg, "rdmacore"), msg)
	assert.True(t, errors.Is(err, verbs.ErrNoDevice), msg)
	assert.True(t, strings.Contains(msg, "no RDMA device"), msg)
	_, err = Listen("rdma", "127.0.0.1:0")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "RDMA_PROVIDER=soft"), err.Error())
}

func TestConnProviderFromEnv(t *testing.T) {
	t.Setenv(ProviderEnv, "soft")
	ln, err := Listen("rdma", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if s, err := ln.Accept(); err == nil {
			s.Close()
		}
	}()
	c, err := Dial("rdma", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "soft", c.(*Conn).Provider())
	assert.Equal(t, "soft", ln.(*Listener).Provider())
}

// activePortInSysfs reports whether the kernel lists an RDMA device with an
// active port (/sys/class/infiniband/DEV/ports/N/state is "4: ACTIVE").
func activePortInSysfs(t *testing.T) bool {
	states, err := filepath.Glob("/sys/class/infiniband/*/ports/*/state")
	require.NoError(t, err)
	for _, f := range states {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasSuffix(strings.TrimSpace(string(b)), ": ACTIVE") {
			t.Logf("%s: %s", f, strings.TrimSpace(string(b)))
			return true
		}
	}
	return false
}
