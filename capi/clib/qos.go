package main

/*
#include <stdint.h>
*/
import "C"

//export rdma_set_tos
func rdma_set_tos(h C.uintptr_t, tos C.int) (ret C.int) {
	const fn = "rdma_set_tos"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if err := ctx.SetTrafficClass(int(tos)); err != nil {
		return fail(fn, err)
	}
	return 0
}

//export rdma_get_tos
func rdma_get_tos(h C.uintptr_t, idx C.int) (ret C.int) {
	const fn = "rdma_get_tos"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	tc, err := ctx.TrafficClass(int(idx))
	if err != nil {
		return fail(fn, err)
	}
	return C.int(tc)
}
