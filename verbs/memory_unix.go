//go:build unix

package verbs

import (
	"os"

	"golang.org/x/sys/unix"
)

var pageSize = os.Getpagesize()

// allocMemory maps private anonymous memory: no descriptor names it, so no
// other process can be handed it or reopen it (the soft provider's
// same-host path copies through rings of its own instead).
func allocMemory(size int) (*Memory, error) {
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, &Error{Op: "mmap", Errno: err.(unix.Errno)}
	}
	return &Memory{buf: buf}, nil
}

func freeMemory(m *Memory) error {
	err := unix.Munmap(m.buf)
	m.buf = nil
	if err != nil {
		return &Error{Op: "munmap", Errno: err.(unix.Errno)}
	}
	return nil
}
