package main

/*
#include <stdint.h>
*/
import "C"

import "github.com/rdmanet/rdma/capi"

//export rdma_set_tos
func rdma_set_tos(h C.uintptr_t, tos C.int) C.int {
	return control("rdma_set_tos", h, func(ctx *capi.Context) (int, error) {
		return 0, ctx.SetTrafficClass(int(tos))
	})
}

//export rdma_get_tos
func rdma_get_tos(h C.uintptr_t, idx C.int) C.int {
	return control("rdma_get_tos", h, func(ctx *capi.Context) (int, error) {
		return ctx.TrafficClass(int(idx))
	})
}
