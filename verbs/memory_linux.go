//go:build linux

package verbs

import (
	"os"

	"golang.org/x/sys/unix"
)

var pageSize = os.Getpagesize()

func allocMemory(size int) (*Memory, error) {
	// Sealable, so that the size can be sealed below: a process this memory
	// is shared with (the soft provider's same-host path) can then map it
	// without risking SIGBUS from a later shrink.
	fd, err := unix.MemfdCreate("rdma-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, &Error{Op: "memfd_create", Errno: err.(unix.Errno)}
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, &Error{Op: "ftruncate", Errno: err.(unix.Errno)}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, &Error{Op: "fcntl(F_ADD_SEALS)", Errno: err.(unix.Errno)}
	}
	buf, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, &Error{Op: "mmap", Errno: err.(unix.Errno)}
	}
	return &Memory{buf: buf, fd: fd}, nil
}

func freeMemory(m *Memory) error {
	err := unix.Munmap(m.buf)
	unix.Close(m.fd)
	m.buf = nil
	if err != nil {
		return &Error{Op: "munmap", Errno: err.(unix.Errno)}
	}
	return nil
}
