package rdma

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func TestProviderChoice(t *testing.T) {
	t.Setenv(ProviderEnv, "soft")
	p, err := chooseProvider("")
	require.NoError(t, err)
	assert.Equal(t, "soft", p.Name())

	t.Setenv(ProviderEnv, "")
	p, err = chooseProvider("auto")
	require.NoError(t, err)
	want := "soft"
	if rc, err := verbs.Lookup(ProviderRDMACore); err == nil && hasActiveDevice(rc) {
		want = ProviderRDMACore
	}
	assert.Equal(t, want, p.Name())

	_, err = chooseProvider("nonesuch")
	assert.Error(t, err)
}

// RDMA_PROVIDER=rdmacore on a machine without a device: a clear error that
// says so and how to use the software provider.
func TestRDMACoreWithoutDevice(t *testing.T) {
	if rc, err := verbs.Lookup(ProviderRDMACore); err == nil && hasActiveDevice(rc) {
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
