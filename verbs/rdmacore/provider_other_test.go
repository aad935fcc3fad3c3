//go:build !cgo || !linux

package rdmacore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// Without cgo the provider is there, empty, and points at the soft provider.
func TestUnavailable(t *testing.T) {
	p, err := verbs.Lookup(ProviderName)
	require.NoError(t, err)
	devs, err := p.Devices()
	require.NoError(t, err)
	assert.Empty(t, devs)
	_, err = p.Open("")
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
	assert.Contains(t, err.Error(), "RDMA_PROVIDER=soft")
	_, err = p.CreateEventChannel()
	assert.ErrorIs(t, err, verbs.ErrNoDevice)
}
