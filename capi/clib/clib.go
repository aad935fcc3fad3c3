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
// It serves the few checks an export makes before its preamble.
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

// do is every export's preamble and epilogue, in the manner of
// mdlayher/socket's control: it runs f, turns a panic in f into an internal
// error, and an error from f into the calling thread's rdma_get_error() text
// and errno and the failed value (-1, NULL or 0, as the export's C
// declaration says). An export's own body is then only its checks and its
// call.
func do[T any](fn string, failed T, f func() (T, error)) (ret T) {
	defer recoverTo(fn, &ret, failed)
	v, err := f()
	if err != nil {
		setError(fn, err)
		return failed
	}
	return v
}

// control is do for the exports that take an rdma_context* and return an
// int: it looks the handle up first (NULL, stale and made-up handles are
// errors), then runs f with the context; f's result is the export's, -1 if
// f fails.
func control(fn string, h C.uintptr_t, f func(ctx *capi.Context) (int, error)) C.int {
	return do(fn, -1, func() (C.int, error) {
		ctx, err := lookup(h)
		if err != nil {
			return -1, err
		}
		n, err := f(ctx)
		return C.int(n), err
	})
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
	{capi.ErrMemBusy, codeBusy},
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

// messageLen converts a message length from C: no longer than limit, or
// ErrMessageTooLong.
func messageLen(n C.size_t, limit int) (int, error) {
	size, err := length(n, "len", limit)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err)
	}
	return size, nil
}

// isNull is the error of a pointer argument that is NULL where it may not be.
func isNull(what string) error { return errors.New(what + " is NULL") }

//export rdma_init
func rdma_init(ip *C.char, port C.int, bufSize C.size_t, isServer C.bool) C.uintptr_t {
	return do("rdma_init", 0, func() (C.uintptr_t, error) {
		if ip == nil {
			return 0, isNull("ip")
		}
		size, err := length(bufSize, "buffer size", capi.MaxBufSize)
		if err != nil {
			return 0, err
		}
		ctx, err := capi.Init(C.GoString(ip), int(port), size, bool(isServer))
		if err != nil {
			return 0, err
		}
		h := cgo.NewHandle(ctx)
		contexts.Lock()
		contexts.m[h] = ctx
		contexts.Unlock()
		return C.uintptr_t(h), nil
	})
}

//export rdma_cleanup
func rdma_cleanup(h C.uintptr_t) {
	do("rdma_cleanup", 0, func() (int, error) {
		if h == 0 {
			return 0, nil // like free(NULL)
		}
		contexts.Lock()
		ctx, ok := contexts.m[cgo.Handle(h)]
		delete(contexts.m, cgo.Handle(h))
		contexts.Unlock()
		if !ok {
			return 0, errStaleCtx
		}
		cgo.Handle(h).Delete()
		return 0, ctx.Close()
	})
}

//export rdma_connect_peer
func rdma_connect_peer(h C.uintptr_t, peerIP *C.char, peerPort C.int) C.int {
	return control("rdma_connect_peer", h, func(ctx *capi.Context) (int, error) {
		if peerIP == nil {
			return 0, isNull("peer_ip")
		}
		return ctx.ConnectPeer(C.GoString(peerIP), int(peerPort))
	})
}

//export rdma_accept_peer
func rdma_accept_peer(h C.uintptr_t) C.int {
	return control("rdma_accept_peer", h, func(ctx *capi.Context) (int, error) {
		return ctx.AcceptPeer()
	})
}

//export rdma_reconnect_peer
func rdma_reconnect_peer(h C.uintptr_t, idx C.int, peerIP *C.char, peerPort C.int) C.int {
	return control("rdma_reconnect_peer", h, func(ctx *capi.Context) (int, error) {
		if peerIP == nil {
			return 0, isNull("peer_ip")
		}
		return int(idx), ctx.ReconnectPeer(int(idx), C.GoString(peerIP), int(peerPort))
	})
}

//export rdma_accept_peer_at
func rdma_accept_peer_at(h C.uintptr_t, idx C.int) C.int {
	return control("rdma_accept_peer_at", h, func(ctx *capi.Context) (int, error) {
		return int(idx), ctx.AcceptPeerAt(int(idx))
	})
}

//export rdma_disconnect_peer
func rdma_disconnect_peer(h C.uintptr_t, idx C.int) C.int {
	return control("rdma_disconnect_peer", h, func(ctx *capi.Context) (int, error) {
		return 0, ctx.DisconnectPeer(int(idx))
	})
}

//export rdma_send
func rdma_send(h C.uintptr_t, idx C.int, data unsafe.Pointer, n C.size_t) C.int {
	return control("rdma_send", h, func(ctx *capi.Context) (int, error) {
		if data == nil {
			return 0, isNull("data")
		}
		size, err := messageLen(n, ctx.BufSize())
		if err != nil {
			return 0, err
		}
		return ctx.Send(int(idx), bytesOf(data, size))
	})
}

//export rdma_recv
func rdma_recv(h C.uintptr_t, idx C.int, data unsafe.Pointer, maxLen C.size_t) C.int {
	return control("rdma_recv", h, func(ctx *capi.Context) (int, error) {
		if data == nil {
			return 0, isNull("data")
		}
		// No message is longer than MaxBufSize, so a larger buffer is as
		// good as MaxBufSize bytes of it.
		size := min(uint64(maxLen), capi.MaxBufSize)
		return ctx.Recv(int(idx), bytesOf(data, int(size)))
	})
}

//export rdma_broadcast
func rdma_broadcast(h C.uintptr_t, data unsafe.Pointer, n C.size_t) C.int {
	return control("rdma_broadcast", h, func(ctx *capi.Context) (int, error) {
		if data == nil {
			return 0, isNull("data")
		}
		size, err := messageLen(n, ctx.BufSize())
		if err != nil {
			return 0, err
		}
		return size, ctx.Broadcast(bytesOf(data, size))
	})
}

//export rdma_sequential_alltoall
func rdma_sequential_alltoall(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, msgSize C.size_t) C.int {
	return control("rdma_sequential_alltoall", h, func(ctx *capi.Context) (int, error) {
		// C gives no length for recv_buf. BUFFER_SIZE is what the original's
		// own programs pass, so it is the bound: never written past,
		// whatever buf_size is and whatever a peer sends.
		return 0, allToAll(ctx, sendBuf, recvBuf, capi.BufferSize, msgSize, true)
	})
}

//export rdma_sequential_alltoall_n
func rdma_sequential_alltoall_n(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, recvLen, msgSize C.size_t) C.int {
	return control("rdma_sequential_alltoall_n", h, func(ctx *capi.Context) (int, error) {
		// No combined message is longer than MaxBufSize, so a larger buffer
		// is as good as MaxBufSize bytes of it.
		return 0, allToAll(ctx, sendBuf, recvBuf, int(min(uint64(recvLen), capi.MaxBufSize)), msgSize, false)
	})
}

// allToAll runs rdma_sequential_alltoall with recv_buf's first recvLen bytes
// as the only memory it may write. bounded (rdma_sequential_alltoall, which
// has no recv_len) adds to an exchange too large for recvLen where to turn.
func allToAll(ctx *capi.Context, sendBuf, recvBuf unsafe.Pointer, recvLen int, msgSize C.size_t, bounded bool) error {
	switch {
	case sendBuf == nil:
		return isNull("send_buf")
	case recvBuf == nil:
		return isNull("recv_buf")
	case msgSize == 0:
		return errors.New("msg_size is 0")
	}
	size, err := length(msgSize, "msg_size", ctx.BufSize())
	if err != nil {
		return fmt.Errorf("%w: %w", capi.ErrMessageTooLong, err)
	}
	recv := bytesOf(recvBuf, recvLen)
	if err := ctx.SequentialAllToAll(bytesOf(sendBuf, size), recv, size); err != nil {
		if bounded && (errors.Is(err, capi.ErrMessageTooLong) || errors.Is(err, capi.ErrInvalidArgument)) {
			err = fmt.Errorf("%w (rdma_sequential_alltoall writes at most BUFFER_SIZE bytes: pass the buffer's length to rdma_sequential_alltoall_n)", err)
		}
		return err
	}
	if verbose {
		traceCombined(ctx, recv, size)
	}
	return nil
}

//export rdma_group_init
func rdma_group_init(h C.uintptr_t) C.int {
	return control("rdma_group_init", h, func(ctx *capi.Context) (int, error) {
		return ctx.GroupInit()
	})
}

//export rdma_group_size
func rdma_group_size(h C.uintptr_t) C.int {
	return control("rdma_group_size", h, func(ctx *capi.Context) (int, error) {
		n := ctx.GroupSize()
		if n == 0 {
			return 0, capi.ErrNoGroup
		}
		return n, nil
	})
}

//export rdma_barrier
func rdma_barrier(h C.uintptr_t) C.int {
	return control("rdma_barrier", h, func(ctx *capi.Context) (int, error) {
		return 0, ctx.Barrier()
	})
}

//export rdma_bcast
func rdma_bcast(h C.uintptr_t, buf unsafe.Pointer, n C.size_t, root C.int) C.int {
	return control("rdma_bcast", h, func(ctx *capi.Context) (int, error) {
		if buf == nil && n > 0 {
			return 0, isNull("buf")
		}
		size, err := messageLen(n, capi.MaxBufSize)
		if err != nil {
			return 0, err
		}
		return 0, ctx.Bcast(bytesOf(buf, size), int(root))
	})
}

//export rdma_allgather
func rdma_allgather(h C.uintptr_t, sendBuf unsafe.Pointer, n C.size_t, recvBuf unsafe.Pointer, recvLen C.size_t) C.int {
	return control("rdma_allgather", h, func(ctx *capi.Context) (int, error) {
		if (sendBuf == nil && n > 0) || recvBuf == nil {
			return 0, errors.New("send_buf or recv_buf is NULL")
		}
		size, err := messageLen(n, capi.MaxBufSize)
		if err != nil {
			return 0, err
		}
		groupSize := ctx.GroupSize()
		if groupSize == 0 {
			return 0, capi.ErrNoGroup
		}
		if uint64(recvLen) < uint64(groupSize)*uint64(size) {
			return 0, fmt.Errorf("%w: recv_len %d is less than %d ranks of %d bytes", capi.ErrMessageTooLong, uint64(recvLen), groupSize, size)
		}
		return 0, ctx.AllGather(bytesOf(sendBuf, size), bytesOf(recvBuf, groupSize*size))
	})
}

//export rdma_allreduce
func rdma_allreduce(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, count C.size_t, dtype, op C.int) C.int {
	return control("rdma_allreduce", h, func(ctx *capi.Context) (int, error) {
		return 0, reduce(ctx, sendBuf, recvBuf, count, dtype, op, -1)
	})
}

//export rdma_reduce
func rdma_reduce(h C.uintptr_t, sendBuf, recvBuf unsafe.Pointer, count C.size_t, dtype, op, root C.int) C.int {
	const fn = "rdma_reduce"
	// Before the context: a negative root is this call's error whatever
	// else is wrong.
	if root < 0 {
		return fail(fn, fmt.Errorf("root %d is negative", int(root)))
	}
	return control(fn, h, func(ctx *capi.Context) (int, error) {
		return 0, reduce(ctx, sendBuf, recvBuf, count, dtype, op, int(root))
	})
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
func reduce(ctx *capi.Context, sendBuf, recvBuf unsafe.Pointer, count C.size_t, dtype, op C.int, root int) error {
	cop, ok := ops[op]
	if !ok {
		return fmt.Errorf("op %d is not RDMA_SUM, RDMA_PROD, RDMA_MIN or RDMA_MAX", int(op))
	}
	n, err := length(count, "count", capi.MaxBufSize/8)
	if err != nil {
		return err
	}
	if sendBuf == nil && n > 0 {
		return isNull("send_buf")
	}
	// recv_buf matters at every rank of an all-reduce, at the root only of
	// a reduce; elsewhere NULL stands for "none" and send is passed (unused).
	if recvBuf == nil {
		if root < 0 || (ctx.GroupSize() > 0 && root == groupRank(ctx)) {
			return isNull("recv_buf")
		}
		recvBuf = sendBuf
	}
	switch dtype {
	case typeInt32:
		return reduceAs[int32](ctx, sendBuf, recvBuf, n, cop, root)
	case typeInt64:
		return reduceAs[int64](ctx, sendBuf, recvBuf, n, cop, root)
	case typeFloat:
		return reduceAs[float32](ctx, sendBuf, recvBuf, n, cop, root)
	case typeDouble:
		return reduceAs[float64](ctx, sendBuf, recvBuf, n, cop, root)
	}
	return fmt.Errorf("datatype %d is not RDMA_INT32, RDMA_INT64, RDMA_FLOAT or RDMA_DOUBLE", int(dtype))
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
