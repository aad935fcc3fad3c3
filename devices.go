package rdma

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

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
	devs, err := os.ReadDir(sysfsIB)
	if err != nil {
		return nil
	}
	var out []DeviceCounters
	for _, d := range devs {
		ports, err := os.ReadDir(filepath.Join(sysfsIB, d.Name(), "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			dir := filepath.Join(sysfsIB, d.Name(), "ports", p.Name())
			out = append(out, DeviceCounters{
				Device:     d.Name(),
				Port:       n,
				Counters:   readCounterDir(filepath.Join(dir, "counters")),
				HWCounters: readCounterDir(filepath.Join(dir, "hw_counters")),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// readCounterDir reads a directory of files each holding one decimal
// counter; what is not one (a missing file, EINVAL on a counter the
// device lacks, lifespan's setting) is left out.
func readCounterDir(dir string) map[string]uint64 {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	m := make(map[string]uint64, len(es))
	for _, e := range es {
		if e.IsDir() || e.Name() == "lifespan" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		m[e.Name()] = v
	}
	return m
}
