package sysfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReadPortCounters reads a tree as the kernel lays it out, sorted, leaves
// out what is not a port or a counter, and yields nothing without a tree.
func TestReadPortCounters(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(v), 0o644))
	}
	write("rxe0/ports/1/counters/port_xmit_data", "1234\n")
	write("rxe0/ports/1/counters/unreadable", "N/A\n")
	write("rxe0/ports/1/hw_counters/lifespan", "10\n")
	write("rxe0/ports/1/hw_counters/rnr_nak_retry_err", "7\n")
	write("mlx5_0/ports/2/counters/port_rcv_data", "99\n")
	write("mlx5_0/ports/10/counters/port_rcv_data", "5\n")
	write("mlx5_0/ports/x/counters/port_rcv_data", "1\n") // not a port
	write("mlx5_0/ports/2/hw_counters/sub/x", "1\n")      // not a counter

	got := ReadPortCounters(root)
	assert.Equal(t, []PortCounters{
		{Device: "mlx5_0", Port: 2, Counters: map[string]uint64{"port_rcv_data": 99}, HWCounters: map[string]uint64{}},
		{Device: "mlx5_0", Port: 10, Counters: map[string]uint64{"port_rcv_data": 5}},
		{Device: "rxe0", Port: 1, Counters: map[string]uint64{"port_xmit_data": 1234}, HWCounters: map[string]uint64{"rnr_nak_retry_err": 7}},
	}, got)

	assert.Nil(t, ReadPortCounters(filepath.Join(root, "absent")))
}
