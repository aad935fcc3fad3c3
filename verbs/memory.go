package verbs

import (
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Memory is a block of memory outside the Go heap, suitable for registration:
// page-aligned, zeroed, never moved or freed by the garbage collector. It is
// private anonymous memory: no file descriptor names it, so it is never
// shared with another process (a device reaches it only through the MRs
// registered over it).
type Memory struct {
	buf []byte
	// MRs registered over the block and not yet deregistered, of every
	// PD and provider (PinMemory: counted up under memMu's read lock,
	// down by Unpin), and whether Free unmapped it (under memMu): Free
	// looks at mrs with memMu held, so that no registration starts on a
	// block Free is unmapping, and no Free unmaps one an MR still covers.
	mrs   atomic.Int64
	freed bool
}

// AllocMemory returns size bytes of registrable memory, rounded up to whole
// pages. Free it with Free once every MR over it is deregistered (Free
// refuses before).
func AllocMemory(size int) (*Memory, error) {
	if size <= 0 {
		return nil, Errorf("alloc_memory", syscall.EINVAL, "size %d must be positive", size)
	}
	m, err := allocMemory(roundToPage(size))
	if err != nil {
		return nil, err
	}
	trackMemory(m)
	return m, nil
}

// Bytes is the whole block. It stays valid until Free.
func (m *Memory) Bytes() []byte { return m.buf }

// Len is the block's size in bytes.
func (m *Memory) Len() int { return len(m.buf) }

// Addr is the virtual address of the block's first byte.
func (m *Memory) Addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(m.buf))) }

// ErrMemoryRegistered is Free's error while an MR covers any of the block:
// nothing was freed. It matches syscall.EBUSY.
var ErrMemoryRegistered = Errorf("free_memory", syscall.EBUSY, "memory regions still cover the block: deregister them first")

// Free unmaps the block. While an MR of any protection domain (of any
// provider) still covers any of it, Free fails with ErrMemoryRegistered
// (EBUSY) and changes nothing: a device may still read or write it. Using
// Bytes afterwards faults; Free twice is a no-op.
func (m *Memory) Free() error {
	memMu.Lock()
	switch {
	case m.freed:
		memMu.Unlock()
		return nil
	case m.mrs.Load() > 0:
		memMu.Unlock()
		return ErrMemoryRegistered
	}
	m.freed = true
	untrackMemoryLocked(m)
	memMu.Unlock()
	return freeMemory(m)
}

// PinMemory is for providers: it finds the block that holds all of buf,
// as MemoryOf does, and counts an MR over it, which Free then refuses to
// unmap until the provider calls Unpin (once the MR is deregistered and
// its device touches the memory no more). nil if buf is not (entirely)
// inside a live block.
func PinMemory(buf []byte) *Memory {
	memMu.RLock()
	defer memMu.RUnlock()
	m, _ := memoryOfLocked(buf)
	if m != nil {
		m.mrs.Add(1)
	}
	return m
}

// Unpin ends one PinMemory's count.
func (m *Memory) Unpin() { m.mrs.Add(-1) }

// Registered is how many MRs cover the block now.
func (m *Memory) Registered() int { return int(m.mrs.Load()) }

func roundToPage(n int) int {
	p := pageSize
	return (n + p - 1) / p * p
}

// The allocation table lets RegMR check that a buffer is registrable and lets
// providers find the Memory behind an address.
var (
	memMu    sync.RWMutex
	memTable []*Memory // sorted by Addr
	memBytes atomic.Int64
)

// MemoryInUse is how many bytes of AllocMemory blocks are allocated and not
// yet freed in this process: the registrable memory its connections hold
// (virtual size; pages never touched are not resident).
func MemoryInUse() int64 { return memBytes.Load() }

func trackMemory(m *Memory) {
	memBytes.Add(int64(m.Len()))
	memMu.Lock()
	defer memMu.Unlock()
	i := sort.Search(len(memTable), func(i int) bool { return memTable[i].Addr() > m.Addr() })
	memTable = append(memTable, nil)
	copy(memTable[i+1:], memTable[i:])
	memTable[i] = m
}

// untrackMemoryLocked drops m from the table. Called with memMu held.
func untrackMemoryLocked(m *Memory) {
	memBytes.Add(-int64(m.Len()))
	for i, x := range memTable {
		if x == m {
			memTable = append(memTable[:i], memTable[i+1:]...)
			return
		}
	}
}

// MemoryOf returns the Memory that contains all of buf and buf's offset in it,
// or nil if buf is not (entirely) inside memory from AllocMemory.
func MemoryOf(buf []byte) (*Memory, int) {
	memMu.RLock()
	defer memMu.RUnlock()
	return memoryOfLocked(buf)
}

// memoryOfLocked is MemoryOf with memMu held.
func memoryOfLocked(buf []byte) (*Memory, int) {
	if len(buf) == 0 {
		return nil, 0
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	end := start + uintptr(len(buf))
	i := sort.Search(len(memTable), func(i int) bool { return memTable[i].Addr() > start }) - 1
	if i < 0 {
		return nil, 0
	}
	m := memTable[i]
	if end > m.Addr()+uintptr(m.Len()) {
		return nil, 0
	}
	return m, int(start - m.Addr())
}

// AddrOf is the virtual address of buf's first byte, the form SGEs and
// remote addresses take.
func AddrOf(buf []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))) }
