package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/rdmanet/rdma/capi"
)

// mems maps each rdma_mem* handed to C (a number, never a Go pointer) to
// its memory, until rdma_free.
var mems = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*capi.Mem
}{m: map[uint64]*capi.Mem{}}

var (
	errNilMem   = errors.New("mem is NULL")
	errStaleMem = errors.New("mem is not a live rdma_mem (not returned by rdma_alloc, or already passed to rdma_free)")
	errNilDesc  = errors.New("desc is NULL")
)

func findMem(h C.uintptr_t) (*capi.Mem, error) {
	if h == 0 {
		return nil, errNilMem
	}
	mems.Lock()
	m, ok := mems.m[uint64(h)]
	mems.Unlock()
	if !ok {
		return nil, errStaleMem
	}
	return m, nil
}

// descOf copies the rdma_desc at p.
func descOf(p unsafe.Pointer) (*capi.Desc, error) {
	if p == nil {
		return nil, errNilDesc
	}
	d := new(capi.Desc)
	copy(d[:], unsafe.Slice((*byte)(p), capi.DescSize))
	return d, nil
}

//export rdma_alloc
func rdma_alloc(h C.uintptr_t, size C.size_t) (ret C.uintptr_t) {
	const fn = "rdma_alloc"
	defer recoverTo(fn, &ret, 0)
	ctx, err := lookup(h)
	if err != nil {
		setError(fn, err)
		return 0
	}
	n, err := length(size, "size", capi.MaxMemSize)
	if err != nil {
		setError(fn, fmt.Errorf("%w: %w", capi.ErrInvalidArgument, err))
		return 0
	}
	m, err := ctx.Alloc(n)
	if err != nil {
		setError(fn, err)
		return 0
	}
	mems.Lock()
	defer mems.Unlock()
	mems.next++
	mems.m[mems.next] = m
	return C.uintptr_t(mems.next)
}

//export rdma_mem_ptr
func rdma_mem_ptr(h C.uintptr_t) (ret unsafe.Pointer) {
	const fn = "rdma_mem_ptr"
	defer recoverTo(fn, &ret, nil)
	m, err := findMem(h)
	if err != nil {
		setError(fn, err)
		return nil
	}
	// The memory is outside the Go heap (verbs.AllocMemory): C may keep
	// this pointer until rdma_free.
	return unsafe.Pointer(unsafe.SliceData(m.Bytes()))
}

//export rdma_mem_size
func rdma_mem_size(h C.uintptr_t) (ret C.size_t) {
	const fn = "rdma_mem_size"
	defer recoverTo(fn, &ret, 0)
	m, err := findMem(h)
	if err != nil {
		setError(fn, err)
		return 0
	}
	return C.size_t(len(m.Bytes()))
}

//export rdma_free
func rdma_free(h C.uintptr_t) (ret C.int) {
	const fn = "rdma_free"
	defer recoverTo(fn, &ret, -1)
	if h == 0 {
		return 0 // like free(NULL)
	}
	mems.Lock()
	m, ok := mems.m[uint64(h)]
	delete(mems.m, uint64(h))
	mems.Unlock()
	if !ok {
		return fail(fn, errStaleMem)
	}
	if err := m.Free(); err != nil {
		return fail(fn, err)
	}
	return 0
}

//export rdma_expose
func rdma_expose(h C.uintptr_t, idx C.int, mh C.uintptr_t, off, n C.size_t, access C.int, desc unsafe.Pointer) (ret C.int) {
	const fn = "rdma_expose"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	m, err := findMem(mh)
	if err != nil {
		return fail(fn, err)
	}
	if desc == nil {
		return fail(fn, errNilDesc)
	}
	o, size, err := span(off, n)
	if err != nil {
		return fail(fn, err)
	}
	d, err := ctx.Expose(int(idx), m, o, size, capi.Access(access))
	if err != nil {
		return fail(fn, err)
	}
	copy(unsafe.Slice((*byte)(desc), capi.DescSize), d[:])
	return 0
}

//export rdma_unexpose
func rdma_unexpose(h C.uintptr_t, desc unsafe.Pointer) (ret C.int) {
	const fn = "rdma_unexpose"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	d, err := descOf(desc)
	if err != nil {
		return fail(fn, err)
	}
	if err := ctx.Unexpose(*d); err != nil {
		return fail(fn, err)
	}
	return 0
}

// span converts an offset and a length from C.
func span(off, n C.size_t) (int, int, error) {
	o, err := length(off, "offset", capi.MaxMemSize)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", capi.ErrInvalidArgument, err)
	}
	size, err := length(n, "len", capi.MaxMemSize)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", capi.ErrInvalidArgument, err)
	}
	return o, size, nil
}

// oneSidedArgs are a one-sided call's arguments, converted from C.
type oneSidedArgs struct {
	ctx       *capi.Context
	remote    *capi.Desc
	remoteOff int
	local     *capi.Mem
	localOff  int
	n         int
}

func oneSided(h C.uintptr_t, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t) (a oneSidedArgs, err error) {
	if a.ctx, err = lookup(h); err != nil {
		return a, err
	}
	if a.remote, err = descOf(desc); err != nil {
		return a, err
	}
	// A zero-length write needs no local memory.
	if mh != 0 || n != 0 {
		if a.local, err = findMem(mh); err != nil {
			return a, err
		}
	}
	if a.remoteOff, a.n, err = span(remoteOff, n); err != nil {
		return a, err
	}
	if a.localOff, _, err = span(localOff, 0); err != nil {
		return a, err
	}
	return a, nil
}

//export rdma_write
func rdma_write(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t) (ret C.int) {
	const fn = "rdma_write"
	defer recoverTo(fn, &ret, -1)
	a, err := oneSided(h, desc, remoteOff, mh, localOff, n)
	if err != nil {
		return fail(fn, err)
	}
	done, err := a.ctx.Write(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n)
	return result(fn, done, err)
}

//export rdma_write_notify
func rdma_write_notify(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, value C.uint) (ret C.int) {
	const fn = "rdma_write_notify"
	defer recoverTo(fn, &ret, -1)
	a, err := oneSided(h, desc, remoteOff, mh, localOff, n)
	if err != nil {
		return fail(fn, err)
	}
	done, err := a.ctx.WriteNotify(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n, uint32(value))
	return result(fn, done, err)
}

//export rdma_read
func rdma_read(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t) (ret C.int) {
	const fn = "rdma_read"
	defer recoverTo(fn, &ret, -1)
	a, err := oneSided(h, desc, remoteOff, mh, localOff, n)
	if err != nil {
		return fail(fn, err)
	}
	done, err := a.ctx.Read(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n)
	return result(fn, done, err)
}

//export rdma_iwrite
func rdma_iwrite(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, req *C.uintptr_t) (ret C.int) {
	const fn = "rdma_iwrite"
	defer recoverTo(fn, &ret, -1)
	return startOneSided(fn, true, h, idx, desc, remoteOff, mh, localOff, n, req)
}

//export rdma_iread
func rdma_iread(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, req *C.uintptr_t) (ret C.int) {
	const fn = "rdma_iread"
	defer recoverTo(fn, &ret, -1)
	return startOneSided(fn, false, h, idx, desc, remoteOff, mh, localOff, n, req)
}

// startOneSided is rdma_iwrite's (write) and rdma_iread's body.
func startOneSided(fn string, write bool, h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, req *C.uintptr_t) C.int {
	if req == nil {
		return fail(fn, errors.New("req is NULL"))
	}
	a, err := oneSided(h, desc, remoteOff, mh, localOff, n)
	if err != nil {
		return fail(fn, err)
	}
	start := a.ctx.IRead
	if write {
		start = a.ctx.IWrite
	}
	r, err := start(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n)
	return issued(fn, r, err, req)
}

//export rdma_wait_notify
func rdma_wait_notify(h C.uintptr_t, idx C.int, value *C.uint, timeoutMS C.int) (ret C.int) {
	const fn = "rdma_wait_notify"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	timeout := time.Duration(-1)
	if timeoutMS >= 0 {
		timeout = time.Duration(timeoutMS) * time.Millisecond
	}
	v, n, err := ctx.WaitNotify(int(idx), timeout)
	if err != nil {
		return fail(fn, err)
	}
	if value != nil {
		*value = C.uint(v)
	}
	return C.int(n)
}
