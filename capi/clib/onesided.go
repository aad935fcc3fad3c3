package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/rdmanet/rdma/capi"
)

// mems maps each rdma_mem* handed to C to its memory, until rdma_free.
var mems = newTable[*capi.Mem](errNilMem, errStaleMem)

var (
	errNilMem   = errors.New("mem is NULL")
	errStaleMem = errors.New("mem is not a live rdma_mem (not returned by rdma_alloc, or already passed to rdma_free)")
	errNilDesc  = errors.New("desc is NULL")
)

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
func rdma_alloc(h C.uintptr_t, size C.size_t) C.uintptr_t {
	return do("rdma_alloc", 0, func() (C.uintptr_t, error) {
		ctx, err := lookup(h)
		if err != nil {
			return 0, err
		}
		n, err := length(size, "size", capi.MaxMemSize)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", capi.ErrInvalidArgument, err)
		}
		m, err := ctx.Alloc(n)
		if err != nil {
			return 0, err
		}
		return mems.add(m), nil
	})
}

//export rdma_mem_ptr
func rdma_mem_ptr(h C.uintptr_t) unsafe.Pointer {
	return do("rdma_mem_ptr", nil, func() (unsafe.Pointer, error) {
		m, err := mems.find(h)
		if err != nil {
			return nil, err
		}
		// The memory is outside the Go heap (verbs.AllocMemory): C may keep
		// this pointer until rdma_free.
		return unsafe.Pointer(unsafe.SliceData(m.Bytes())), nil
	})
}

//export rdma_mem_size
func rdma_mem_size(h C.uintptr_t) C.size_t {
	return do("rdma_mem_size", 0, func() (C.size_t, error) {
		m, err := mems.find(h)
		if err != nil {
			return 0, err
		}
		return C.size_t(len(m.Bytes())), nil
	})
}

//export rdma_free
func rdma_free(h C.uintptr_t) C.int {
	return do("rdma_free", -1, func() (C.int, error) {
		if h == 0 {
			return 0, nil // like free(NULL)
		}
		m, err := mems.find(h)
		if err != nil {
			return -1, err
		}
		// Memory in use (RDMA_ERR_BUSY) is not freed and keeps its
		// handle, for a later rdma_free; otherwise the handle goes.
		err = m.Free()
		if errors.Is(err, capi.ErrMemBusy) {
			return -1, err
		}
		mems.take(h)
		return 0, err
	})
}

//export rdma_expose
func rdma_expose(h C.uintptr_t, idx C.int, mh C.uintptr_t, off, n C.size_t, access C.int, desc unsafe.Pointer) C.int {
	return control("rdma_expose", h, func(ctx *capi.Context) (int, error) {
		m, err := mems.find(mh)
		if err != nil {
			return 0, err
		}
		if desc == nil {
			return 0, errNilDesc
		}
		o, size, err := span(off, n)
		if err != nil {
			return 0, err
		}
		d, err := ctx.Expose(int(idx), m, o, size, capi.Access(access))
		if err != nil {
			return 0, err
		}
		copy(unsafe.Slice((*byte)(desc), capi.DescSize), d[:])
		return 0, nil
	})
}

//export rdma_unexpose
func rdma_unexpose(h C.uintptr_t, desc unsafe.Pointer) C.int {
	return control("rdma_unexpose", h, func(ctx *capi.Context) (int, error) {
		d, err := descOf(desc)
		if err != nil {
			return 0, err
		}
		return 0, ctx.Unexpose(*d)
	})
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
	remote    *capi.Desc
	remoteOff int
	local     *capi.Mem
	localOff  int
	n         int
}

func oneSided(desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t) (a oneSidedArgs, err error) {
	if a.remote, err = descOf(desc); err != nil {
		return a, err
	}
	// A zero-length write needs no local memory.
	if mh != 0 || n != 0 {
		if a.local, err = mems.find(mh); err != nil {
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

// oneSidedControl is control for the one-sided exports: their arguments
// are converted (after the context is looked up) before f runs with them.
func oneSidedControl(fn string, h C.uintptr_t, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t,
	f func(ctx *capi.Context, a oneSidedArgs) (int, error)) C.int {
	return control(fn, h, func(ctx *capi.Context) (int, error) {
		a, err := oneSided(desc, remoteOff, mh, localOff, n)
		if err != nil {
			return 0, err
		}
		return f(ctx, a)
	})
}

//export rdma_write
func rdma_write(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t) C.int {
	return oneSidedControl("rdma_write", h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		return ctx.Write(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n)
	})
}

//export rdma_write_timeout
func rdma_write_timeout(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, timeoutMS C.int) C.int {
	return oneSidedControl("rdma_write_timeout", h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		return ctx.WriteTimeout(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n, timeoutOf(timeoutMS))
	})
}

//export rdma_write_notify_timeout
func rdma_write_notify_timeout(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, value C.uint, timeoutMS C.int) C.int {
	return oneSidedControl("rdma_write_notify_timeout", h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		return ctx.WriteNotifyTimeout(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n, uint32(value), timeoutOf(timeoutMS))
	})
}

//export rdma_read_timeout
func rdma_read_timeout(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, timeoutMS C.int) C.int {
	return oneSidedControl("rdma_read_timeout", h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		return ctx.ReadTimeout(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n, timeoutOf(timeoutMS))
	})
}

// timeoutOf is a C timeout in milliseconds: negative for none.
func timeoutOf(ms C.int) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

//export rdma_write_notify
func rdma_write_notify(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, value C.uint) C.int {
	return oneSidedControl("rdma_write_notify", h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		return ctx.WriteNotify(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n, uint32(value))
	})
}

//export rdma_read
func rdma_read(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t) C.int {
	return oneSidedControl("rdma_read", h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		return ctx.Read(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n)
	})
}

//export rdma_iwrite
func rdma_iwrite(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, req *C.uintptr_t) C.int {
	return startOneSided("rdma_iwrite", true, h, idx, desc, remoteOff, mh, localOff, n, req)
}

//export rdma_iread
func rdma_iread(h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, req *C.uintptr_t) C.int {
	return startOneSided("rdma_iread", false, h, idx, desc, remoteOff, mh, localOff, n, req)
}

// startOneSided is rdma_iwrite's (write) and rdma_iread's body.
func startOneSided(fn string, write bool, h C.uintptr_t, idx C.int, desc unsafe.Pointer, remoteOff C.size_t, mh C.uintptr_t, localOff, n C.size_t, req *C.uintptr_t) C.int {
	// Before the context, as the original order of checks had it.
	if req == nil {
		return fail(fn, isNull("req"))
	}
	return oneSidedControl(fn, h, desc, remoteOff, mh, localOff, n, func(ctx *capi.Context, a oneSidedArgs) (int, error) {
		start := ctx.IRead
		if write {
			start = ctx.IWrite
		}
		r, err := start(int(idx), a.remote, a.remoteOff, a.local, a.localOff, a.n)
		return issued(r, err, req)
	})
}

//export rdma_wait_notify
func rdma_wait_notify(h C.uintptr_t, idx C.int, value *C.uint, timeoutMS C.int) C.int {
	return control("rdma_wait_notify", h, func(ctx *capi.Context) (int, error) {
		v, n, err := ctx.WaitNotify(int(idx), timeoutOf(timeoutMS))
		if err != nil {
			return 0, err
		}
		if value != nil {
			*value = C.uint(v)
		}
		return n, nil
	})
}
