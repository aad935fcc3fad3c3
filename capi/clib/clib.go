// Command clib is librdma.so: the original rdma_lib's C API (rdma_lib.h)
// over package capi. Build it with
//
//	go build -buildmode=c-shared -o build/lib/librdma.so ./capi/clib
//
// (make capi does, and installs include/rdma_lib.h and rdma.pc beside it).
// cgo's generated header is not the API: it speaks in Go types, while
// include/rdma_lib.h declares exactly the original's functions and
// constants.
//
// An rdma_context* handed to C is a runtime/cgo.Handle value, never a Go
// pointer; every call checks it against the live handles first, so NULL, a
// stale or a made-up context is an error, not a crash. Errors are set as the
// calling thread's rdma_get_error() text (a __thread buffer in errbuf.c):
// cgo runs an exported function, and the C calls it makes, on the thread that
// called it.
package main

/*
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

void rdma_set_error(const char *msg, size_t len, int code);
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"

	"github.com/rdmanet/rdma/capi"
	"github.com/rdmanet/rdma/collectives"
)

func main() {}

// contexts maps each live handle given to C to its context. A plain map
// under a lock: a lookup on every call must not allocate, as boxing a
// handle into a sync.Map key would.
var contexts = struct {
	sync.RWMutex
	m map[cgo.Handle]*capi.Context
}{m: map[cgo.Handle]*capi.Context{}}

// setError makes msg the calling thread's rdma_get_error() text.
func setError(fn string, err error) {
	msg := fn + ": " + strings.TrimPrefix(err.Error(), "capi: ")
	// The C side copies msg before returning and keeps no pointer to it.
	C.rdma_set_error((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)), C.int(errorCode(err)))
}

// fail sets the calling thread's error text and returns the C API's -1.
func fail(fn string, err error) C.int {
	setError(fn, err)
	return -1
}

// recoverTo turns a panic into an error return, so that no bug in this
// library takes down the C program. Use as: defer recoverTo("fn", &ret, -1).
func recoverTo[T any](fn string, ret *T, failed T) {
	if r := recover(); r != nil {
		setError(fn, fmt.Errorf("%w: %v", errInternal, r))
		*ret = failed
	}
}

// Error codes of rdma_get_errno, as rdma_lib.h defines them.
const (
	codeInvalid       = 1
	codeBadContext    = 2
	codeClosed        = 3
	codeNotServer     = 4
	codeTooManyPeers  = 5
	codeNoSuchPeer    = 6
	codeDisconnected  = 7
	codePeerGone      = 8
	codeNoPeers       = 9
	codeMessageSize   = 10
	codeProtocol      = 11
	codePeerConnected = 12
	codeConnect       = 13
	codeInternal      = 14
	codeNoGroup       = 15
	codeGroupFailed   = 16
	codeBusy          = 17
	codeCanceled      = 18
	codeBadRequest    = 19
	codeRemoteAccess  = 20
	codeBadDesc       = 21
	codeTimeout       = 22
	codeNotSupported  = 23
	codeBadMem        = 24
)

// codes maps the errors calls return to codes, first match wins: a call's
// own error comes before the errors of the steps it wraps.
var codes = []struct {
	err  error
	code int
}{
	{errNilCtx, codeBadContext},
	{errStaleCtx, codeBadContext},
	{errInternal, codeInternal},
	{capi.ErrCanceled, codeCanceled},
	{capi.ErrBusy, codeBusy},
	{errStaleReq, codeBadRequest},
	{errNilMem, codeBadMem},
	{errStaleMem, codeBadMem},
	{capi.ErrMemFreed, codeBadMem},
	{capi.ErrRemoteAccess, codeRemoteAccess},
	{capi.ErrBadDesc, codeBadDesc},
	{capi.ErrTimeout, codeTimeout},
	{capi.ErrNotSupported, codeNotSupported},
	{capi.ErrClosed, codeClosed},
	{capi.ErrNotServer, codeNotServer},
	{capi.ErrTooManyPeers, codeTooManyPeers},
	{capi.ErrNoSuchPeer, codeNoSuchPeer},
	{capi.ErrPeerConnected, codePeerConnected},
	{capi.ErrPeerDisconnected, codeDisconnected},
	{capi.ErrPeerGone, codePeerGone},
	{capi.ErrNoPeers, codeNoPeers},
	{capi.ErrMessageTooLong, codeMessageSize},
	{capi.ErrProtocol, codeProtocol},
	{capi.ErrNoGroup, codeNoGroup},
	{collectives.ErrBroken, codeGroupFailed},
	{capi.ErrInvalidArgument, codeInvalid},
	{capi.ErrConnect, codeConnect},
}

// errorCode is err's rdma_get_errno code: an argument error unless it
// matches one of codes.
func errorCode(err error) int {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	var re *collectives.RankError
	if errors.As(err, &re) {
		return codeGroupFailed
	}
	return codeInvalid
}

var (
	errInternal = errors.New("internal error")
	errNilCtx   = errors.New("ctx is NULL")
	errStaleCtx = errors.New("ctx is not a live rdma_context (not returned by rdma_init, or already passed to rdma_cleanup)")
)

func lookup(h C.uintptr_t) (*capi.Context, error) {
	if h == 0 {
		return nil, errNilCtx
	}
	contexts.RLock()
	ctx, ok := contexts.m[cgo.Handle(h)]
	contexts.RUnlock()
	if !ok {
		return nil, errStaleCtx
	}
	return ctx, nil
}

// length converts a C size to a Go length no larger than limit.
func length(n C.size_t, what string, limit int) (int, error) {
	if uint64(n) > uint64(limit) {
		return 0, fmt.Errorf("%s %d is too large (the limit is %d)", what, uint64(n), limit)
	}
	return int(n), nil
}

// bytesOf views C memory as a byte slice; it never points into the Go heap.
func bytesOf(p unsafe.Pointer, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

//export rdma_init
func rdma_init(ip *C.char, port C.int, bufSize C.size_t, isServer C.bool) (ret C.uintptr_t) {
	const fn = "rdma_init"
	defer recoverTo(fn, &ret, 0)
	if ip == nil {
		setError(fn, errors.New("ip is NULL"))
		return 0
	}
	size, err := length(bufSize, "buffer size", capi.MaxBufSize)
	if err != nil {
		setError(fn, err)
		return 0
	}
	ctx, err := capi.Init(C.GoString(ip), int(port), size, bool(isServer))
	if err != nil {
		setError(fn, err)
		return 0
	}
	h := cgo.NewHandle(ctx)
	contexts.Lock()
	contexts.m[h] = ctx
	contexts.Unlock()
	return C.uintptr_t(h)
}

//export rdma_cleanup
func rdma_cleanup(h C.uintptr_t) {
	const fn = "rdma_cleanup"
	var ignored int
	defer recoverTo(fn, &ignored, 0)
	if h == 0 {
		return // like free(NULL)
	}
	contexts.Lock()
	ctx, ok := contexts.m[cgo.Handle(h)]
	delete(contexts.m, cgo.Handle(h))
	contexts.Unlock()
	if !ok {
		setError(fn, errStaleCtx)
		return
	}
	cgo.Handle(h).Delete()
	if err := ctx.Close(); err != nil {
		setError(fn, err)
	}
}

//export rdma_connect_peer
func rdma_connect_peer(h C.uintptr_t, peerIP *C.char, peerPort C.int) (ret C.int) {
	const fn = "rdma_connect_peer"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if peerIP == nil {
		return fail(fn, errors.New("peer_ip is NULL"))
	}
	idx, err := ctx.ConnectPeer(C.GoString(peerIP), int(peerPort))
	if err != nil {
		return fail(fn, err)
	}
	return C.int(idx)
}

//export rdma_accept_peer
func rdma_accept_peer(h C.uintptr_t) (ret C.int) {
	const fn = "rdma_accept_peer"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	idx, err := ctx.AcceptPeer()
	if err != nil {
		return fail(fn, err)
	}
	return C.int(idx)
}

//export rdma_reconnect_peer
func rdma_reconnect_peer(h C.uintptr_t, idx C.int, peerIP *C.char, peerPort C.int) (ret C.int) {
	const fn = "rdma_reconnect_peer"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if peerIP == nil {
		return fail(fn, errors.New("peer_ip is NULL"))
	}
	if err := ctx.ReconnectPeer(int(idx), C.GoString(peerIP), int(peerPort)); err != nil {
		return fail(fn, err)
	}
	return idx
}

//export rdma_accept_peer_at
func rdma_accept_peer_at(h C.uintptr_t, idx C.int) (ret C.int) {
	const fn = "rdma_accept_peer_at"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if err := ctx.AcceptPeerAt(int(idx)); err != nil {
		return fail(fn, err)
	}
	return idx
}

//export rdma_disconnect_peer
func rdma_disconnect_peer(h C.uintptr_t, idx C.int) (ret C.int) {
	const fn = "rdma_disconnect_peer"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if err := ctx.DisconnectPeer(int(idx)); err != nil {
		return fail(fn, err)
	}
	return 0
}

//export rdma_send
func rdma_send(h C.uintptr_t, idx C.int, data unsafe.Pointer, n C.size_t) (ret C.int) {
	const fn = "rdma_send"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if data == nil {
		return fail(fn, errors.New("data is NULL"))
	}
	size, err := length(n, "len", ctx.BufSize())
	if err != nil {
		return fail(fn, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err))
	}
	sent, err := ctx.Send(int(idx), bytesOf(data, size))
	if err != nil {
		return fail(fn, err)
	}
	return C.int(sent)
}

//export rdma_recv
func rdma_recv(h C.uintptr_t, idx C.int, data unsafe.Pointer, maxLen C.size_t) (ret C.int) {
	const fn = "rdma_recv"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if data == nil {
		return fail(fn, errors.New("data is NULL"))
	}
	// No message is longer than MaxBufSize, so a larger buffer is as good
	// as MaxBufSize bytes of it.
	size := min(uint64(maxLen), capi.MaxBufSize)
	n, err := ctx.Recv(int(idx), bytesOf(data, int(size)))
	if err != nil {
		return fail(fn, err)
	}
	return C.int(n)
}

//export rdma_broadcast
func rdma_broadcast(h C.uintptr_t, data unsafe.Pointer, n C.size_t) (ret C.int) {
	const fn = "rdma_broadcast"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if data == nil {
		return fail(fn, errors.New("data is NULL"))
	}
	size, err := length(n, "len", ctx.BufSize())
	if err != nil {
		return fail(fn, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err))
	}
	if err := ctx.Broadcast(bytesOf(data, size)); err != nil {
		return fail(fn, err)
	}
	return C.int(size)
}

//export rdma_sequential_alltoall
func rdma_sequential_alltoall(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, msgSize C.size_t) (ret C.int) {
	const fn = "rdma_sequential_alltoall"
	defer recoverTo(fn, &ret, -1)
	// C gives no length for recv_buf. BUFFER_SIZE is what the original's own
	// programs pass, so it is the bound: never written past, whatever
	// buf_size is and whatever a peer sends.
	return allToAll(fn, h, sendBuf, recvBuf, capi.BufferSize, msgSize)
}

//export rdma_sequential_alltoall_n
func rdma_sequential_alltoall_n(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, recvLen, msgSize C.size_t) (ret C.int) {
	const fn = "rdma_sequential_alltoall_n"
	defer recoverTo(fn, &ret, -1)
	// No combined message is longer than MaxBufSize, so a larger buffer is
	// as good as MaxBufSize bytes of it.
	return allToAll(fn, h, sendBuf, recvBuf, int(min(uint64(recvLen), capi.MaxBufSize)), msgSize)
}

// allToAll runs rdma_sequential_alltoall with recv_buf's first recvLen bytes
// as the only memory it may write.
func allToAll(fn string, h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, recvLen int, msgSize C.size_t) C.int {
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	switch {
	case sendBuf == nil:
		return fail(fn, errors.New("send_buf is NULL"))
	case recvBuf == nil:
		return fail(fn, errors.New("recv_buf is NULL"))
	case msgSize == 0:
		return fail(fn, errors.New("msg_size is 0"))
	}
	size, err := length(msgSize, "msg_size", ctx.BufSize())
	if err != nil {
		return fail(fn, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err))
	}
	recv := bytesOf(recvBuf, recvLen)
	err = ctx.SequentialAllToAll(bytesOf(sendBuf, size), recv, size)
	if err != nil {
		if fn == "rdma_sequential_alltoall" && (errors.Is(err, capi.ErrMessageTooLong) || errors.Is(err, capi.ErrInvalidArgument)) {
			err = fmt.Errorf("%w (rdma_sequential_alltoall writes at most BUFFER_SIZE bytes: pass the buffer's length to rdma_sequential_alltoall_n)", err)
		}
		return fail(fn, err)
	}
	if verbose {
		traceCombined(ctx, recv, size)
	}
	return 0
}

//export rdma_group_init
func rdma_group_init(h C.uintptr_t) (ret C.int) {
	const fn = "rdma_group_init"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	rank, err := ctx.GroupInit()
	if err != nil {
		return fail(fn, err)
	}
	return C.int(rank)
}

//export rdma_group_size
func rdma_group_size(h C.uintptr_t) (ret C.int) {
	const fn = "rdma_group_size"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	n := ctx.GroupSize()
	if n == 0 {
		return fail(fn, capi.ErrNoGroup)
	}
	return C.int(n)
}

//export rdma_barrier
func rdma_barrier(h C.uintptr_t) (ret C.int) {
	const fn = "rdma_barrier"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if err := ctx.Barrier(); err != nil {
		return fail(fn, err)
	}
	return 0
}

//export rdma_bcast
func rdma_bcast(h C.uintptr_t, buf unsafe.Pointer, n C.size_t, root C.int) (ret C.int) {
	const fn = "rdma_bcast"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if buf == nil && n > 0 {
		return fail(fn, errors.New("buf is NULL"))
	}
	size, err := length(n, "len", capi.MaxBufSize)
	if err != nil {
		return fail(fn, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err))
	}
	if err := ctx.Bcast(bytesOf(buf, size), int(root)); err != nil {
		return fail(fn, err)
	}
	return 0
}

//export rdma_allgather
func rdma_allgather(h C.uintptr_t, sendBuf unsafe.Pointer, n C.size_t, recvBuf unsafe.Pointer, recvLen C.size_t) (ret C.int) {
	const fn = "rdma_allgather"
	defer recoverTo(fn, &ret, -1)
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	if (sendBuf == nil && n > 0) || recvBuf == nil {
		return fail(fn, errors.New("send_buf or recv_buf is NULL"))
	}
	size, err := length(n, "len", capi.MaxBufSize)
	if err != nil {
		return fail(fn, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err))
	}
	groupSize := ctx.GroupSize()
	if groupSize == 0 {
		return fail(fn, capi.ErrNoGroup)
	}
	if uint64(recvLen) < uint64(groupSize)*uint64(size) {
		return fail(fn, fmt.Errorf("%w: recv_len %d is less than %d ranks of %d bytes", capi.ErrMessageTooLong, uint64(recvLen), groupSize, size))
	}
	if err := ctx.AllGather(bytesOf(sendBuf, size), bytesOf(recvBuf, groupSize*size)); err != nil {
		return fail(fn, err)
	}
	return 0
}

//export rdma_allreduce
func rdma_allreduce(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, count C.size_t, dtype, op C.int) (ret C.int) {
	const fn = "rdma_allreduce"
	defer recoverTo(fn, &ret, -1)
	return reduce(fn, h, sendBuf, recvBuf, count, dtype, op, -1)
}

//export rdma_reduce
func rdma_reduce(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, count C.size_t, dtype, op, root C.int) (ret C.int) {
	const fn = "rdma_reduce"
	defer recoverTo(fn, &ret, -1)
	if root < 0 {
		return fail(fn, fmt.Errorf("root %d is negative", int(root)))
	}
	return reduce(fn, h, sendBuf, recvBuf, count, dtype, op, int(root))
}

// Element types and operators of rdma_allreduce and rdma_reduce, as
// rdma_lib.h defines them.
const (
	typeInt32  = 1
	typeInt64  = 2
	typeFloat  = 3
	typeDouble = 4

	opSum  = 1
	opProd = 2
	opMin  = 3
	opMax  = 4
)

var ops = map[C.int]collectives.Op{opSum: collectives.Sum, opProd: collectives.Prod, opMin: collectives.Min, opMax: collectives.Max}

// reduce runs an all-reduce (root < 0) or a reduce to root.
func reduce(fn string, h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, count C.size_t, dtype, op C.int, root int) C.int {
	ctx, err := lookup(h)
	if err != nil {
		return fail(fn, err)
	}
	cop, ok := ops[op]
	if !ok {
		return fail(fn, fmt.Errorf("op %d is not RDMA_SUM, RDMA_PROD, RDMA_MIN or RDMA_MAX", int(op)))
	}
	n, err := length(count, "count", capi.MaxBufSize/8)
	if err != nil {
		return fail(fn, err)
	}
	if sendBuf == nil && n > 0 {
		return fail(fn, errors.New("send_buf is NULL"))
	}
	// recv_buf matters at every rank of an all-reduce, at the root only of
	// a reduce; elsewhere NULL stands for "none" and send is passed (unused).
	if recvBuf == nil {
		if root < 0 || (ctx.GroupSize() > 0 && root == groupRank(ctx)) {
			return fail(fn, errors.New("recv_buf is NULL"))
		}
		recvBuf = sendBuf
	}
	switch dtype {
	case typeInt32:
		err = reduceAs[int32](ctx, sendBuf, recvBuf, n, cop, root)
	case typeInt64:
		err = reduceAs[int64](ctx, sendBuf, recvBuf, n, cop, root)
	case typeFloat:
		err = reduceAs[float32](ctx, sendBuf, recvBuf, n, cop, root)
	case typeDouble:
		err = reduceAs[float64](ctx, sendBuf, recvBuf, n, cop, root)
	default:
		return fail(fn, fmt.Errorf("datatype %d is not RDMA_INT32, RDMA_INT64, RDMA_FLOAT or RDMA_DOUBLE", int(dtype)))
	}
	if err != nil {
		return fail(fn, err)
	}
	return 0
}

func groupRank(ctx *capi.Context) int { return ctx.GroupRank() }

func reduceAs[T collectives.Number](ctx *capi.Context, sendBuf, recvBuf unsafe.Pointer, n int, op collectives.Op, root int) error {
	var send, recv []T
	if n > 0 {
		send = unsafe.Slice((*T)(sendBuf), n)
		recv = unsafe.Slice((*T)(recvBuf), n)
	}
	if root < 0 {
		return capi.AllReduce(ctx, send, recv, op)
	}
	return capi.Reduce(ctx, root, send, recv, op)
}

// verbose (RDMA_LIB_VERBOSE set and not "0") makes rdma_sequential_alltoall
// print the combined messages, as the original library always did. Blocks are
// fixed-size and NUL-padded, so a C program's printf("%s", recv_buf) shows
// only the first; this shows them all, each up to its first NUL, joined the
// way the original joined them ("a; b; c;").
var verbose = func() bool { v := os.Getenv("RDMA_LIB_VERBOSE"); return v != "" && v != "0" }()

func traceCombined(ctx *capi.Context, recv []byte, msgSize int) {
	var b strings.Builder
	for i := 0; i < ctx.Participants(); i++ {
		block := recv[i*msgSize : (i+1)*msgSize]
		if n := bytes.IndexByte(block, 0); n >= 0 {
			block = block[:n]
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.Write(block)
	}
	who := "CLIENT"
	if ctx.IsServer() {
		who = "SERVER"
	}
	fmt.Fprintf(os.Stdout, "%s: Combined message: '%s;'\n", who, b.String())
}

// Keep the C int results in range: every length is at most MaxBufSize.
var _ = [1]struct{}{}[capi.MaxBufSize/math.MaxInt32]
