package rdma

import "github.com/rdmanet/rdma/internal/sysfs"

// DeviceCounters are an RDMA device port's own counters, as the kernel
// publishes them in sysfs: counters (the InfiniBand port counters:
// port_xmit_data, port_rcv_packets, symbol_error, ...; the data counters
// count 4-byte words) and hw_counters (the driver's: rnr_nak_retry_err,
// local_ack_timeout_err, out_of_sequence, duplicate_request, ...). `rdma
// statistic` and perfquery show the same numbers.
type DeviceCounters struct {
	Device     string
	Port       int
	Counters   map[string]uint64
	HWCounters map[string]uint64
}

// sysfsIB is where the kernel lists RDMA devices (a variable for tests).
var sysfsIB = "/sys/class/infiniband"

// ReadDeviceCounters reads every RDMA device port's counters from sysfs.
// It reads files only; a machine without devices (or without sysfs, or a
// counter the kernel does not let us read) yields what there is, possibly
// nothing.
func ReadDeviceCounters() []DeviceCounters {
	var out []DeviceCounters
	for _, p := range sysfs.ReadPortCounters(sysfsIB) {
		out = append(out, DeviceCounters(p))
	}
	return out
}
