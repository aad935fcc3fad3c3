package main

/*
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/rdmanet/rdma/capi"
)

// requests maps each rdma_request* handed to C to its request until wait,
// test or waitany reports it complete.
var requests = newTable[*capi.Request](isNull("req"), errStaleReq)

var errStaleReq = errors.New("req is not a pending rdma_request (never returned, or already completed by rdma_wait, rdma_test or rdma_waitany)")

// issued gives the caller the handle of the request a call just started,
// or fails the call with err.
func issued(r *capi.Request, err error, req *C.uintptr_t) (int, error) {
	if err != nil {
		return 0, err
	}
	*req = requests.add(r)
	return 0, nil
}

//export rdma_isend
func rdma_isend(h C.uintptr_t, idx C.int, data unsafe.Pointer, n C.size_t, req *C.uintptr_t) C.int {
	return control("rdma_isend", h, func(ctx *capi.Context) (int, error) {
		if req == nil {
			return 0, isNull("req")
		}
		if data == nil && n > 0 {
			return 0, isNull("data")
		}
		size, err := messageLen(n, ctx.BufSize())
		if err != nil {
			return 0, err
		}
		r, err := ctx.ISend(int(idx), bytesOf(data, size))
		return issued(r, err, req)
	})
}

//export rdma_irecv
func rdma_irecv(h C.uintptr_t, idx C.int, data unsafe.Pointer, maxLen C.size_t, req *C.uintptr_t) C.int {
	return control("rdma_irecv", h, func(ctx *capi.Context) (int, error) {
		if req == nil {
			return 0, isNull("req")
		}
		if data == nil {
			return 0, isNull("data")
		}
		size := min(uint64(maxLen), capi.MaxBufSize)
		r, err := ctx.IRecv(int(idx), bytesOf(data, int(size)))
		return issued(r, err, req)
	})
}

//export rdma_wait
func rdma_wait(req C.uintptr_t) C.int {
	return do("rdma_wait", -1, func() (C.int, error) {
		r, err := requests.find(req)
		if err != nil {
			return -1, err
		}
		n, err := r.Wait()
		requests.take(req)
		return C.int(n), err
	})
}

//export rdma_test
func rdma_test(req C.uintptr_t, done *C.int) C.int {
	return do("rdma_test", -1, func() (C.int, error) {
		if done == nil {
			return -1, isNull("done")
		}
		r, err := requests.find(req)
		if err != nil {
			return -1, err
		}
		finished, n, err := r.Test()
		if !finished {
			*done = 0
			return 0, nil
		}
		*done = 1
		requests.take(req)
		return C.int(n), err
	})
}

//export rdma_waitany
func rdma_waitany(reqs *C.uintptr_t, count C.int, index *C.int) C.int {
	return do("rdma_waitany", -1, func() (C.int, error) {
		if index == nil {
			return -1, isNull("index")
		}
		*index = -1
		if reqs == nil || count <= 0 || count > capi.MaxInFlight {
			return -1, fmt.Errorf("reqs is NULL or count %d is not in 1..%d", int(count), capi.MaxInFlight)
		}
		handles := unsafe.Slice(reqs, int(count))
		rs := make([]*capi.Request, len(handles))
		for i, h := range handles {
			if h == 0 {
				continue
			}
			r, err := requests.find(h)
			if err != nil {
				return -1, fmt.Errorf("reqs[%d]: %w", i, err)
			}
			rs[i] = r
		}
		i, n, err := capi.WaitAny(rs)
		if i < 0 {
			return -1, errors.New("every entry of reqs is NULL")
		}
		requests.take(handles[i])
		handles[i] = 0
		*index = C.int(i)
		return C.int(n), err
	})
}
