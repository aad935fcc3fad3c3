package soft_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// RegDmaBufMR takes dma-bufs only: another descriptor, even one it could
// map, is EINVAL, as for the kernel.
func TestDmaBufNotADmaBuf(t *testing.T) {
	p, err := verbs.Lookup(soft.Name)
	require.NoError(t, err)
	ctx, err := p.Open(soft.DeviceName)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Dealloc()
	memfd, err := unix.MemfdCreate("not-a-dmabuf", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(memfd)
	require.NoError(t, unix.Ftruncate(memfd, 1<<16))
	for _, fd := range []int{memfd, -1, 1 << 20} {
		_, err = pd.RegDmaBufMR(0, 4096, 0, fd, verbs.AccessLocalWrite)
		require.ErrorIs(t, err, syscall.EINVAL, "fd %d", fd)
	}
}

// With a udmabuf (where the kernel has /dev/udmabuf): the CPU's view and
// the MR are the same memory, at any offset, and Dereg unmaps it.
func TestDmaBufUdmabuf(t *testing.T) {
	u, err := verbs.AllocUdmabuf(1 << 16)
	if err != nil {
		t.Skipf("no udmabuf: %v", err)
	}
	defer u.Close()
	p, err := verbs.Lookup(soft.Name)
	require.NoError(t, err)
	ctx, err := p.Open(soft.DeviceName)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Dealloc()
	mr, err := pd.RegDmaBufMR(5000, 10000, 0x1000, u.Fd(), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	require.Equal(t, uint64(0x1000), mr.Addr())
	require.Len(t, mr.Bytes(), 10000)
	copy(u.Bytes()[5000:], "through the memfd")
	require.Equal(t, "through the memfd", string(mr.Bytes()[:17]))
	require.NoError(t, mr.Dereg())
}

// The mapping RegDmaBufMR makes, checked with a memfd standing in for a
// dma-buf (no exporter here): a peer's WRITE at the MR's iova plus an
// offset lands in the memory at the registration's offset plus it, a
// READ brings it back, and after Dereg the peer reaches nothing.
func TestDmaBufMapping(t *testing.T) {
	defer soft.AcceptAnyFd()()
	memfd, err := unix.MemfdCreate("stand-in-dmabuf", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(memfd)
	require.NoError(t, unix.Ftruncate(memfd, 1<<16))
	view, err := unix.Mmap(memfd, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(view)

	w, d := waiterAndDialer(t)
	const iova, offset, length = 0x10000, 5000, 20000
	mr, err := w.pd.RegDmaBufMR(offset, length, iova, memfd,
		verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	require.Equal(t, uint64(iova), mr.Addr())
	require.Len(t, mr.Bytes(), length)
	w.toRTR(t, d)
	w.toRTS(t)
	d.toRTR(t, w)
	d.toRTS(t)

	src := d.mem.Bytes()[:3000]
	for i := range src {
		src[i] = byte(i*3 + 1)
	}
	d.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(d.mr, src)}, RemoteAddr: iova + 700, RKey: mr.RKey()}, verbs.WCSuccess)
	require.Equal(t, src, view[offset+700:offset+700+3000], "the WRITE is not where the registration maps it")
	back := d.mem.Bytes()[8192 : 8192+3000]
	d.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(d.mr, back)}, RemoteAddr: iova + 700, RKey: mr.RKey()}, verbs.WCSuccess)
	require.Equal(t, src, back)
	// Past its end: a remote access error.
	d.post(t, verbs.SendWR{WRID: 3, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(d.mr, back[:16])}, RemoteAddr: iova + length - 8, RKey: mr.RKey()}, verbs.WCRemAccessErr)
	require.NoError(t, mr.Dereg())
}
