package soft

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// RegDmaBufMR is ibv_reg_dmabuf_mr. Soft reaches registered memory through
// the CPU only, so it maps the dma-buf (MAP_SHARED) where its exporter
// allows that: udmabuf's host memory does; most GPU drivers' dma-bufs do
// not, and for those the error says so. The mapping lives until Dereg has
// closed the region's fence.
func (p *pd) RegDmaBufMR(offset uint64, length int, iova uint64, fd int, access verbs.Access) (verbs.MR, error) {
	const op = "ibv_reg_dmabuf_mr"
	if length <= 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "length %d", length)
	}
	if err := checkMR(op, length, access); err != nil {
		return nil, err
	}
	if !dmaBufCheck(fd) {
		return nil, verbs.Errorf(op, syscall.EINVAL, "descriptor %d is not a dma-buf", fd)
	}
	page := uint64(os.Getpagesize())
	start := offset &^ (page - 1)
	skip := offset - start
	prot := unix.PROT_READ
	if access&verbs.AccessLocalWrite != 0 {
		prot |= unix.PROT_WRITE
	}
	mp, err := unix.MmapPtr(fd, int64(start), nil, uintptr(skip)+uintptr(length), prot, unix.MAP_SHARED)
	if err != nil {
		errno, _ := err.(unix.Errno)
		if errno == 0 {
			errno = syscall.EINVAL
		}
		return nil, verbs.Errorf(op, errno, "%s cannot register this dma-buf: its exporter does not let the CPU map bytes %d..%d of it (mmap: %v), and soft reaches registered memory through the CPU only",
			DeviceName, offset, offset+uint64(length), err)
	}
	buf := unsafe.Slice((*byte)(unsafe.Add(mp, skip)), length)
	unmap := func() { _ = unix.MunmapPtr(mp, uintptr(skip)+uintptr(length)) }
	m, err := p.register(op, buf, iova, access)
	if err != nil {
		unmap()
		return nil, err
	}
	m.unmap = unmap
	return m, nil
}

// dmaBufCheck is isDmaBuf; tests replace it to map a memfd in a dma-buf's
// place where the kernel offers no dma-buf exporter.
var dmaBufCheck = isDmaBuf

// isDmaBuf reports whether fd is a dma-buf: the kernel lists an exporter
// name in the fdinfo of dma-bufs only.
func isDmaBuf(fd int) bool {
	if fd < 0 {
		return false
	}
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return false
	}
	defer f.Close()
	var b [4096]byte // fdinfo of a dma-buf is a few short lines
	n, _ := f.Read(b[:])
	return bytes.Contains(b[:n], []byte("\nexp_name:"))
}
