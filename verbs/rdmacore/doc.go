// Package rdmacore is the verbs provider for real RDMA devices (InfiniBand,
// RoCE, iWARP, Soft-RoCE, siw): a thin cgo layer over rdma-core's libibverbs
// and librdmacm. Importing it registers the provider "rdmacore" with package
// verbs.
//
// Building it needs a C compiler and nothing of rdma-core: the structs it
// shares with the libraries are declared in the package (rdmacore_abi.h,
// from their stable ABI), and the libraries are opened by soname
// (libibverbs.so.1, librdmacm.so.1) with dlopen the first time the provider
// is used. Where they are not installed the provider lists no device,
// Available says what is missing, and the rdma package's automatic choice
// is the soft provider.
//
// All cgo lives in one file of one-to-one wrappers; everything else is Go.
// Completion channels and CM event channels are set non-blocking and waited
// on through Go's runtime poller (CM events by one goroutine per channel
// that queues them for GetEvent), so a waiting goroutine holds no OS thread,
// but for a completion channel's direct wait: the first 20 ms of a
// GetEvent block the caller's thread in the kernel, as C's blocking mode
// does, at most RDMA_DIRECT_WAITS (4) of them at once (directwait_linux.go).
// Posting work requests and polling completions go through C arrays kept per
// QP and per CQ, so they allocate nothing and hand no Go pointer to C.
// Registered memory must come from verbs.AllocMemory.
//
// Built without cgo, or on another OS than Linux, the package still compiles
// and registers a provider that lists no device and whose Open explains that
// the software provider ("soft") is the one to use.
package rdmacore

// ProviderName is the name the provider registers under.
const ProviderName = "rdmacore"
