package verbs

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Udmabuf is host memory exported as a dma-buf: a memfd handed to the
// kernel's udmabuf driver (/dev/udmabuf, CONFIG_UDMABUF), which makes a
// dma-buf of its pages. It stands in for device memory where there is
// none (a test of RegDmaBufMR), and is what a program uses to give a
// dma-buf consumer ordinary memory.
type Udmabuf struct {
	fd    int    // the dma-buf
	memfd int    // the memory under it
	mem   []byte // the CPU's view, through the memfd
}

// udmabufCreate is UDMABUF_CREATE, _IOW('u', 0x42, struct udmabuf_create).
const udmabufCreate = 0x40187542

// udmabufCreateArg is struct udmabuf_create (linux/udmabuf.h).
type udmabufCreateArg struct {
	memfd  uint32
	flags  uint32 // UDMABUF_FLAGS_CLOEXEC
	offset uint64
	size   uint64
}

// ErrNoUdmabuf says that the kernel offers no /dev/udmabuf (or not to
// this process); errors.Is(err, os.ErrNotExist) or os.ErrPermission tells
// which.
var ErrNoUdmabuf = errors.New("verbs: no udmabuf device")

// AllocUdmabuf makes a dma-buf of n bytes of host memory (n rounded up to
// pages). Without /dev/udmabuf the error wraps ErrNoUdmabuf and says why.
func AllocUdmabuf(n int) (*Udmabuf, error) {
	if n <= 0 {
		return nil, &Error{Op: "udmabuf", Errno: unix.EINVAL, Detail: "size must be positive"}
	}
	size := (n + pageSize - 1) / pageSize * pageSize
	dev, err := unix.Open("/dev/udmabuf", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: /dev/udmabuf: %w (the kernel needs CONFIG_UDMABUF; modprobe udmabuf, and access to the device)",
			ErrNoUdmabuf, &os.PathError{Op: "open", Path: "/dev/udmabuf", Err: err})
	}
	defer unix.Close(dev)
	memfd, err := unix.MemfdCreate("verbs-udmabuf", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, &Error{Op: "memfd_create", Errno: err.(unix.Errno)}
	}
	u := &Udmabuf{fd: -1, memfd: memfd}
	fail := func(op string, err error) (*Udmabuf, error) {
		u.Close()
		return nil, &Error{Op: op, Errno: err.(unix.Errno)}
	}
	if err := unix.Ftruncate(memfd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	// udmabuf takes only memfds that cannot shrink under it.
	if _, err := unix.FcntlInt(uintptr(memfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return fail("fcntl(F_ADD_SEALS)", err)
	}
	arg := udmabufCreateArg{memfd: uint32(memfd), flags: 1 /* UDMABUF_FLAGS_CLOEXEC */, size: uint64(size)}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(dev), udmabufCreate, uintptr(unsafe.Pointer(&arg)))
	if errno != 0 {
		return fail("ioctl(UDMABUF_CREATE)", errno)
	}
	u.fd = int(fd)
	p, err := unix.MmapPtr(memfd, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	u.mem = unsafe.Slice((*byte)(p), size)
	return u, nil
}

// Fd is the dma-buf's descriptor, for RegDmaBufMR.
func (u *Udmabuf) Fd() int { return u.fd }

// Len is the dma-buf's size.
func (u *Udmabuf) Len() int { return len(u.mem) }

// Bytes is the CPU's view of the memory (through the memfd, not the
// dma-buf), valid until Close.
func (u *Udmabuf) Bytes() []byte { return u.mem }

// Close releases the descriptors and the CPU's mapping. An MR registered
// on the dma-buf holds its own reference: deregister it first if nothing
// is to reach the memory any more.
func (u *Udmabuf) Close() error {
	if u.mem != nil {
		_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(u.mem)), uintptr(len(u.mem)))
		u.mem = nil
	}
	if u.fd >= 0 {
		unix.Close(u.fd)
		u.fd = -1
	}
	if u.memfd >= 0 {
		unix.Close(u.memfd)
		u.memfd = -1
	}
	return nil
}
