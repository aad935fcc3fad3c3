//go:build unix

package verbs

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = os.Getpagesize()

// allocMemory maps private anonymous memory: no descriptor names it, so no
// other process can be handed it or reopen it (the soft provider's
// same-host path copies through rings of its own instead).
//
// MmapPtr, not Mmap: Mmap also records every mapping in a map of its own
// under a process-wide lock, which the allocation table here already does.
func allocMemory(size int) (*Memory, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, &Error{Op: "mmap", Errno: err.(unix.Errno)}
	}
	return &Memory{buf: unsafe.Slice((*byte)(p), size)}, nil
}

func freeMemory(m *Memory) error {
	err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m.buf)), uintptr(len(m.buf)))
	m.buf = nil
	if err != nil {
		return &Error{Op: "munmap", Errno: err.(unix.Errno)}
	}
	return nil
}
