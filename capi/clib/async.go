package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/rdmanet/rdma/capi"
)

// requests maps each rdma_request* handed to C (a number, never a Go
// pointer) to its request until wait, test or waitany reports it complete.
var requests = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*capi.Request
}{m: map[uint64]*capi.Request{}}

var errStaleReq = errors.New("req is not a pending rdma_request (never returned, or already completed by rdma_wait, rdma_test or rdma_waitany)")

// issued gives the caller the handle of the request a call just started,
// or fails the call with err.
func issued(fn string, r *capi.Request, err error, req *C.uintptr_t) C.int {
	if err != nil {
		return fail(fn, err)
	}
	*req = newRequest(r)
	return 0
}

func newRequest(r *capi.Request) C.uintptr_t {
	requests.Lock()
	defer requests.Unlock()
	requests.next++
	requests.m[requests.next] = r
	return C.uintptr_t(requests.next)
}

func findRequest(h C.uintptr_t) (*capi.Request, error) {
	if h == 0 {
		return nil, errors.New("req is NULL")
	}
	requests.Lock()
	defer requests.Unlock()
	r, ok := requests.m[uint64(h)]
	if !ok {
		return nil, errStaleReq
	}
	return r, nil
}

func releaseRequest(h C.uintptr_t) {
	requests.Lock()
	delete(requests.m, uint64(h))
	requests.Unlock()
}

// result turns a completed request's result into the C API's.
func result(fn string, n int, err error) C.int {
	if err != nil {
		return fail(fn, err)
	}
	return C.int(n)
}

//export rdma_isend
func rdma_isend(h C.uintptr_t, idx C.int, data unsafe.Pointer, n C.size_t, req *C.uintptr_t) (ret C.int) {
	const fn = "rdma_isend"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if req == nil {
		return fail(fn, errors.New("req is NULL"))
	}
	if data == nil && n > 0 {
		return fail(fn, errors.New("data is NULL"))
	}
	size, err := length(n, "len", ctx.BufSize())
	if err != nil {
		return fail(fn, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err))
	}
	r, err := ctx.ISend(int(idx), bytesOf(data, size))
	return issued(fn, r, err, req)
}

//export rdma_irecv
func rdma_irecv(h C.uintptr_t, idx C.int, data unsafe.Pointer, maxLen C.size_t, req *C.uintptr_t) (ret C.int) {
	const fn = "rdma_irecv"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if req == nil {
		return fail(fn, errors.New("req is NULL"))
	}
	if data == nil {
		return fail(fn, errors.New("data is NULL"))
	}
	size := min(uint64(maxLen), capi.MaxBufSize)
	r, err := ctx.IRecv(int(idx), bytesOf(data, int(size)))
	return issued(fn, r, err, req)
}

//export rdma_wait
func rdma_wait(req C.uintptr_t) (ret C.int) {
	const fn = "rdma_wait"
	defer recoverTo(fn, &ret, -1)
	r, err := findRequest(req)
	if err != nil {
		return fail(fn, err)
	}
	n, err := r.Wait()
	releaseRequest(req)
	return result(fn, n, err)
}

//export rdma_test
func rdma_test(req C.uintptr_t, done *C.int) (ret C.int) {
	const fn = "rdma_test"
	defer recoverTo(fn, &ret, -1)
	if done == nil {
		return fail(fn, errors.New("done is NULL"))
	}
	r, err := findRequest(req)
	if err != nil {
		return fail(fn, err)
	}
	finished, n, err := r.Test()
	if !finished {
		*done = 0
		return 0
	}
	*done = 1
	releaseRequest(req)
	return result(fn, n, err)
}

//export rdma_waitany
func rdma_waitany(reqs *C.uintptr_t, count C.int, index *C.int) (ret C.int) {
	const fn = "rdma_waitany"
	defer recoverTo(fn, &ret, -1)
	if index == nil {
		return fail(fn, errors.New("index is NULL"))
	}
	*index = -1
	if reqs == nil || count <= 0 || count > capi.MaxInFlight {
		return fail(fn, fmt.Errorf("reqs is NULL or count %d is not in 1..%d", int(count), capi.MaxInFlight))
	}
	handles := unsafe.Slice(reqs, int(count))
	rs := make([]*capi.Request, len(handles))
	for i, h := range handles {
		if h == 0 {
			continue
		}
		r, err := findRequest(h)
		if err != nil {
			return fail(fn, fmt.Errorf("reqs[%d]: %w", i, err))
		}
		rs[i] = r
	}
	i, n, err := capi.WaitAny(rs)
	if i < 0 {
		return fail(fn, errors.New("every entry of reqs is NULL"))
	}
	releaseRequest(handles[i])
	handles[i] = 0
	*index = C.int(i)
	return result(fn, n, err)
}
