// Package verbs is the Go form of the RDMA verbs (libibverbs) and the RDMA
// connection manager (librdmacm), independent of what carries the bytes.
//
// A Provider supplies the objects: "rdmacore" drives real devices (InfiniBand,
// RoCE, iWARP, Soft-RoCE) through rdma-core, and "soft" emulates a reliable
// connected NIC in pure Go so that the same program runs on machines without
// an RDMA device. Both obey the same semantics and limits; package verbstest is
// the conformance suite that holds them to it.
//
// The object model follows libibverbs closely so that a reader of the C API
// finds what they expect:
//
//	Provider -> EventChannel -> CMID            (connection manager)
//	CMID.Context() -> Context -> PD -> MR        (memory)
//	Context -> CompChannel -> CQ                 (completions)
//	CMID.CreateQP(PD, QPInitAttr) -> QP          (reliable connected queue pair)
//	PD.CreateQP(QPInitAttr) -> QP                (the same, without the CM)
//	PD.RegDmaBufMR(dma-buf fd) -> MR             (device memory: a GPU's)
//
// A QP from PD.CreateQP starts in RESET; its program exchanges QP numbers,
// PSNs, LIDs and GIDs with the peer itself and moves it to RTS with Modify,
// the attributes of each transition checked as the kernel checks them
// (RCTransition). docs/design.md describes both, and how to register GPU
// memory.
//
// Registered memory never lives on the Go heap: it comes from AllocMemory
// (a private anonymous mmap), so that a device may access it at any time
// without the garbage collector moving or freeing it.
//
// Waiting never parks an OS thread. Completion channels wait on Go's runtime
// poller (rdmacore) or on Go channels (soft). CM events go through one queue
// per event channel, which GetEvent waits on: rdmacore fills it from a
// goroutine per channel that is parked on the poller until librdmacm has an
// event, soft from its connection handshakes.
//
// Posting work requests and polling completions allocate nothing: callers keep
// their SendWR, RecvWR and []WC values and reuse them.
package verbs
