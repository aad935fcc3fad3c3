package soft

import "unsafe"

// Copies into a shared-memory ring, whose reader is another process,
// running on another CPU or on this one, as the scheduler has it.
//
// Across CPUs, an ordinary copy into the ring writes lines that the
// reader's CPU still holds from the ring's previous lap, and each store
// waits for its line to be taken back from there. Non-temporal stores write
// whole lines around the caches without that round trip. On one CPU it is
// the other way round: the ring's lines are in this CPU's cache already,
// and non-temporal stores would only make the reader fetch them from
// memory. Measured in a 64 KiB rdma.Conn stream (rdmaperf, client and
// server pinned, CPU profiles) on a 2-CPU host: across CPUs the copy into
// the ring took 9.5 us ordinary and 2.0 us non-temporal, the reader's copy
// out of it 3.3 and 2.6 us; on one CPU 1.8 and 2.0 us, and 1.6 and 2.6 us.
//
// So the writer times its large copies and uses whichever kind has been
// cheaper by a clear margin (the reader's share, which the writer cannot
// see, is larger with non-temporal stores on one CPU), trying the other
// kind now and then to follow the scheduler. Small copies stay ordinary:
// they are the latency path, and their lines are few.
const (
	ntCopyMin     = 16 << 10 // smallest copy that is timed and may go non-temporal
	ntCopyExplore = 32       // every this many large copies, the other kind
)

// ringCopier is the copy-kind choice of one ring's writer (one goroutine
// at a time, as the ring's write side).
type ringCopier struct {
	// cost is the moving average of picoseconds per byte of ordinary (0)
	// and non-temporal (1) copies; 0 before the first.
	cost [2]int64
	n    uint32 // large copies so far
}

// copy copies src into dst, as the built-in copy does.
func (c *ringCopier) copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !haveNTCopy || n < ntCopyMin {
		return copy(dst[:n], src)
	}
	kind := c.pick()
	t0 := monotime()
	if kind == 1 {
		copyNonTemporal(dst[:n], src)
	} else {
		copy(dst[:n], src)
	}
	c.record(kind, monotime()-t0, n)
	return n
}

// pick chooses the kind of the next large copy: 1 non-temporal, 0 ordinary.
func (c *ringCopier) pick() int {
	c.n++
	best := 0
	if c.cost[1] != 0 && c.cost[1]*10 < c.cost[0]*7 {
		best = 1 // at least 30% cheaper
	}
	switch {
	case c.cost[0] == 0:
		return 0
	case c.cost[1] == 0:
		return 1
	case c.n%ntCopyExplore == 0:
		return 1 - best
	}
	return best
}

// record adds a copy of n bytes that took ns nanoseconds to kind's average.
// A sample is capped at four times the average, so that a copy that lost
// the CPU midway moves it little.
func (c *ringCopier) record(kind int, ns int64, n int) {
	s := max(ns, 1) * 1000 / int64(n)
	s = max(s, 1)
	avg := c.cost[kind]
	if avg == 0 {
		c.cost[kind] = s
		return
	}
	s = min(s, 4*avg)
	c.cost[kind] = avg + (s-avg)/8
}

// copyNonTemporal copies src into dst (len(dst) <= len(src)): ordinary
// copies for the unaligned head and the tail, non-temporal stores for the
// 64-byte aligned lines between, all of it visible before the caller's later
// stores (copyNT fences).
func copyNonTemporal(dst, src []byte) {
	n := len(dst)
	head := min(int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst)))&63), n)
	copy(dst[:head], src)
	mid := (n - head) &^ 63
	if mid > 0 {
		copyNT(&dst[head], &src[head], uintptr(mid))
	}
	copy(dst[head+mid:n], src[head+mid:n])
}
