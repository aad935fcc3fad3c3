package rdma

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReadDeviceCounters reads a sysfs tree as the kernel lays it out, leaves
// out what is not a counter, and yields nothing where there is no tree.
func TestReadDeviceCounters(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(v), 0o644))
	}
	write("rxe0/ports/1/counters/port_xmit_data", "1234\n")
	write("rxe0/ports/1/counters/symbol_error", "0\n")
	write("rxe0/ports/1/counters/unreadable", "N/A\n")
	write("rxe0/ports/1/hw_counters/rnr_nak_retry_err", "7\n")
	write("rxe0/ports/1/hw_counters/lifespan", "10\n")
	write("mlx5_0/ports/1/counters/port_rcv_data", "99\n")
	write("mlx5_0/ports/2/hw_counters/out_of_sequence", "3\n")
	write("mlx5_0/ports/x/counters/port_rcv_data", "1\n") // not a port
	prev := sysfsIB
	sysfsIB = root
	defer func() { sysfsIB = prev }()

	got := ReadDeviceCounters()
	require.Len(t, got, 3)
	assert.Equal(t, DeviceCounters{Device: "mlx5_0", Port: 1, Counters: map[string]uint64{"port_rcv_data": 99}}, got[0])
	assert.Equal(t, DeviceCounters{Device: "mlx5_0", Port: 2, HWCounters: map[string]uint64{"out_of_sequence": 3}}, got[1])
	assert.Equal(t, DeviceCounters{Device: "rxe0", Port: 1,
		Counters:   map[string]uint64{"port_xmit_data": 1234, "symbol_error": 0},
		HWCounters: map[string]uint64{"rnr_nak_retry_err": 7}}, got[2])
	assert.Equal(t, got, ReadProcessStats().Devices)

	sysfsIB = filepath.Join(root, "absent")
	assert.Empty(t, ReadDeviceCounters())
}
