// Package sysfs reads the counters the kernel publishes for each RDMA
// device port under /sys/class/infiniband: counters (the InfiniBand port
// counters) and hw_counters (the driver's). It reads files only.
package sysfs

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PortCounters are one device port's counters.
type PortCounters struct {
	Device     string
	Port       int
	Counters   map[string]uint64
	HWCounters map[string]uint64
}

// ReadPortCounters reads every device port's counters below root (the
// kernel's: /sys/class/infiniband), sorted by device and port. A missing
// tree, or a counter the kernel does not let us read, yields what there
// is, possibly nothing.
func ReadPortCounters(root string) []PortCounters {
	devs, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []PortCounters
	for _, d := range devs {
		ports, err := os.ReadDir(filepath.Join(root, d.Name(), "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			dir := filepath.Join(root, d.Name(), "ports", p.Name())
			out = append(out, PortCounters{
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
