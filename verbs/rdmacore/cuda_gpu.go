//go:build cgo && linux && cudagpu

package rdmacore

// A minimal CUDA driver API for TestGPUDmaBuf (build tag cudagpu): GPU
// memory, and the dma-buf descriptor of a range of it
// (cuMemGetHandleForAddressRange, CUDA 11.7), which RegDmaBufMR registers.
// libcuda.so.1 is opened at run time, as rdma-core's libraries are.

/*
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>

typedef int cu_result;
typedef unsigned long long cu_ptr;

static void *cu_lib;
static cu_result (*cu_init)(unsigned);
static cu_result (*cu_device_get)(int *, int);
static cu_result (*cu_ctx_create)(void **, unsigned, int);
static cu_result (*cu_ctx_destroy)(void *);
static cu_result (*cu_mem_alloc)(cu_ptr *, size_t);
static cu_result (*cu_mem_free)(cu_ptr);
static cu_result (*cu_memcpy_dtoh)(void *, cu_ptr, size_t);
static cu_result (*cu_get_handle)(void *, cu_ptr, size_t, int, unsigned long long);

// cu_load returns NULL once libcuda's entry points are there, else what
// is missing.
static const char *cu_load(void) {
	if (!cu_lib && !(cu_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) return dlerror();
#define SYM(v, name) if (!(*(void **)&v = dlsym(cu_lib, name))) return name;
	SYM(cu_init, "cuInit")
	SYM(cu_device_get, "cuDeviceGet")
	SYM(cu_ctx_create, "cuCtxCreate_v2")
	SYM(cu_ctx_destroy, "cuCtxDestroy_v2")
	SYM(cu_mem_alloc, "cuMemAlloc_v2")
	SYM(cu_mem_free, "cuMemFree_v2")
	SYM(cu_memcpy_dtoh, "cuMemcpyDtoH_v2")
	SYM(cu_get_handle, "cuMemGetHandleForAddressRange")
#undef SYM
	return NULL;
}

static int cu_setup(int ordinal, void **ctx) {
	int dev, r;
	if ((r = cu_init(0))) return r;
	if ((r = cu_device_get(&dev, ordinal))) return r;
	return cu_ctx_create(ctx, 0, dev);
}

static int cu_alloc(cu_ptr *p, size_t n) { return cu_mem_alloc(p, n); }
static int cu_free(cu_ptr p) { return cu_mem_free(p); }
static int cu_release(void *ctx) { return cu_ctx_destroy(ctx); }
static int cu_dtoh(void *dst, cu_ptr src, size_t n) { return cu_memcpy_dtoh(dst, src, n); }
// CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD is 1.
static int cu_dmabuf(int *fd, cu_ptr p, size_t n) { return cu_get_handle(fd, p, n, 1, 0); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// gpuMemory is n bytes of a GPU's memory and a CUDA context to reach it.
type gpuMemory struct {
	ctx unsafe.Pointer
	ptr C.cu_ptr
	n   int
}

func cudaCheck(what string, r C.int) error {
	if r != 0 {
		return fmt.Errorf("%s: CUDA error %d", what, int(r))
	}
	return nil
}

// allocGPU loads libcuda and allocates n bytes on GPU ordinal.
func allocGPU(ordinal, n int) (*gpuMemory, error) {
	if missing := C.cu_load(); missing != nil {
		return nil, fmt.Errorf("libcuda.so.1: %s", C.GoString(missing))
	}
	g := &gpuMemory{n: n}
	if err := cudaCheck("creating a CUDA context", C.cu_setup(C.int(ordinal), &g.ctx)); err != nil {
		return nil, err
	}
	if err := cudaCheck("cuMemAlloc", C.cu_alloc(&g.ptr, C.size_t(n))); err != nil {
		C.cu_release(g.ctx)
		return nil, err
	}
	return g, nil
}

// dmaBuf is cuMemGetHandleForAddressRange: a dma-buf descriptor of the
// whole allocation (which must be a multiple of the GPU's page size).
func (g *gpuMemory) dmaBuf() (int, error) {
	var fd C.int
	err := cudaCheck("cuMemGetHandleForAddressRange", C.cu_dmabuf(&fd, g.ptr, C.size_t(g.n)))
	return int(fd), err
}

func (g *gpuMemory) addr() uint64 { return uint64(g.ptr) }

// toHost copies the GPU memory into b (b is only written during the call).
func (g *gpuMemory) toHost(b []byte) error {
	return cudaCheck("cuMemcpyDtoH", C.cu_dtoh(unsafe.Pointer(unsafe.SliceData(b)), g.ptr, C.size_t(len(b))))
}

func (g *gpuMemory) free() {
	C.cu_free(g.ptr)
	C.cu_release(g.ctx)
}
