package capi

import (
	"errors"
	"strings"
)

// Limits and defaults of rdma_lib.h, with the original rdma_lib's values.
const (
	// MaxPeers is the most peers a context may have over its lifetime.
	MaxPeers = 64
	// MaxWR and CQDepth are rdma_lib's queue sizes; the rdma conns size
	// their own queues, so these are informational here.
	MaxWR   = 128
	CQDepth = 256
	// BufferSize is rdma_lib's default message buffer size.
	BufferSize = 4096
	// MaxBufSize is the largest bufSize Init accepts, so that every message
	// length fits the C API's int return values.
	MaxBufSize = 1 << 30
)

// Errors returned, wrapped with the operation and peer, by Context methods.
// Match them with errors.Is.
var (
	ErrClosed           = errors.New("context closed")
	ErrInvalidArgument  = errors.New("invalid argument")
	ErrNotServer        = errors.New("not a server context")
	ErrTooManyPeers     = errors.New("too many peers (MAX_PEERS is 64)")
	ErrNoSuchPeer       = errors.New("no such peer")
	ErrPeerDisconnected = errors.New("peer disconnected")
	ErrPeerGone         = errors.New("peer gone")
	ErrPeerConnected    = errors.New("peer index in use")
	ErrNoPeers          = errors.New("no connected peers")
	ErrMessageTooLong   = errors.New("message too long")
	ErrProtocol         = errors.New("protocol error")
	// ErrConnect is matched by the errors of a connect that failed:
	// refused, unreachable, timed out.
	ErrConnect = errors.New("connection failed")
)

// connectError is a failed dial: its text is the dial's, and it matches
// ErrConnect as well as the dial's own error.
type connectError struct{ err error }

func (e connectError) Error() string   { return e.err.Error() }
func (e connectError) Unwrap() []error { return []error{e.err, ErrConnect} }

// wrapped is an error of a collective that carries the error of one of its
// steps: its text names both once, and errors.Is sees the step's error.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// within reports err, from a step of op, as op's error.
func within(op string, err error) error {
	return &wrapped{msg: "capi: " + op + ": " + strings.TrimPrefix(err.Error(), "capi: "), err: err}
}
