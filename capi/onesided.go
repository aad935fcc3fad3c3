package capi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/rdmanet/rdma"
	"github.com/rdmanet/rdma/internal/onesided"
)

// One-sided operations, thin calls of rdma.Conn's (Expose, Unexpose,
// WriteRemote, ReadRemote, WriteRemoteNotify, WaitNotify; rdma's remote.go):
// a context allocates memory (Alloc, an rdma.Buffer) and exposes a range of
// it to one peer (Expose), which gives a descriptor to send that peer; the peer then writes (Write, WriteNotify) and reads (Read) that
// range with RDMA WRITE and READ on its connection's queue pair, without
// the exposing side taking part. WriteNotify's value reaches the exposing
// side's WaitNotify once the bytes have landed.
//
// What a descriptor allows is decided by the exposing side's device, not by
// the descriptor: it checks the rkey, the bounds and the access of every
// request against the registration, and Unexpose and Free end the
// registration. A descriptor is checked locally first (form, access,
// bounds), so honest mistakes fail with ErrBadDesc and break nothing; an
// access the device refuses fails with ErrRemoteAccess and, as on every
// RDMA device, breaks the connection to that peer on both sides (the peer
// is gone: reconnect to go on).

// DescSize is the size of a Desc.
const DescSize = onesided.DescLen

// MaxMemSize bounds one Alloc.
const MaxMemSize = MaxBufSize

// Access is what an exposed range lets the peer do: AccessRead, AccessWrite
// or both.
type Access int

const (
	AccessRead  Access = Access(onesided.AccessRead)
	AccessWrite Access = Access(onesided.AccessWrite)
)

// NotifyValueMax is the largest value WriteNotify carries.
const NotifyValueMax = rdma.NotifyValueMax

// Desc describes a range one context exposed to one peer; it is what that
// peer needs to write or read it. Send it as bytes: its layout is fixed.
type Desc [DescSize]byte

var (
	// ErrBadDesc is matched by the error of a one-sided call whose
	// descriptor is malformed, or does not allow the access (its access
	// rights, its bounds), or that Unexpose does not know.
	ErrBadDesc = rdma.ErrBadDesc
	// ErrRemoteAccess is matched by the error of a one-sided call that the
	// peer's device refused; the connection to the peer is then broken.
	ErrRemoteAccess = rdma.ErrRemoteAccess
	// ErrNotSupported is matched by the error of a one-sided call on a
	// peer whose connection has no queue pair (the TCP transport).
	ErrNotSupported = errors.New("one-sided operations are not supported on this connection")
	// ErrTimeout is matched by the error of a WaitNotify that timed out.
	ErrTimeout = errors.New("timed out")
	// ErrMemFreed is matched by the error of a call given freed memory.
	ErrMemFreed = errors.New("memory freed")
	// ErrMemBusy is matched by the error of a Free while an operation of
	// this side uses the memory: nothing was freed, and the memory stays
	// the caller's, to free once the operation has returned.
	ErrMemBusy = errors.New("memory in use by an operation")
)

// Mem is memory a context allocated for one-sided operations: outside the
// Go heap, page-aligned, registered with a peer's connection when first
// used with it. Free it with Free (Close frees what is left). It is an
// rdma.Buffer, so Send and Recv of large messages in it take rdma.Conn's
// zero-copy path (the peer RDMA READs them; rdma.Config's
// RendezvousThreshold).
type Mem struct {
	owner *remoteMemory
	mem   *rdma.Buffer
	buf   []byte

	// users counts the operations that use the memory now (use,
	// unuse); Free fails while there are any, and waits for none.
	mu      sync.Mutex
	users   int
	freeing bool // Free is under way: no new use
	freed   bool
}

// exposure is one range exposed to one peer: its memory and the peer's
// connection, by the descriptor Expose returned.
type exposure struct {
	mem  *Mem
	conn *rdma.Conn
}

// remoteMemory is a context's one-sided part: the memory it allocated, the
// ranges of it exposed to peers, and the operations on the ranges peers
// exposed.
type remoteMemory struct {
	peers    *peerTable
	requests *requestQueue

	mu        sync.Mutex
	closed    bool
	mems      map[*Mem]struct{}
	exposures map[Desc]*exposure
}

func newRemoteMemory(peers *peerTable, requests *requestQueue) *remoteMemory {
	return &remoteMemory{
		peers:     peers,
		requests:  requests,
		mems:      map[*Mem]struct{}{},
		exposures: map[Desc]*exposure{},
	}
}

// Alloc allocates size bytes (1..MaxMemSize) of zeroed memory for one-sided
// operations.
func (c *Context) Alloc(size int) (*Mem, error) { return c.remote.alloc(size) }

func (r *remoteMemory) alloc(size int) (*Mem, error) {
	if size <= 0 || size > MaxMemSize {
		return nil, fmt.Errorf("capi: alloc: %w: size %d is not in 1..%d", ErrInvalidArgument, size, MaxMemSize)
	}
	b, err := rdma.AllocBuffer(size)
	if err != nil {
		return nil, fmt.Errorf("capi: alloc: %w", err)
	}
	m := &Mem{owner: r, mem: b, buf: b.Bytes()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		b.Free()
		return nil, fmt.Errorf("capi: alloc: %w", ErrClosed)
	}
	r.mems[m] = struct{}{}
	return m, nil
}

// endExposures forgets m's exposures and returns them with their
// connections, to unexpose.
func (r *remoteMemory) endExposures(m *Mem) ([]Desc, []*rdma.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var exps []Desc
	var conns []*rdma.Conn
	for d, e := range r.exposures {
		if e.mem == m {
			delete(r.exposures, d)
			exps, conns = append(exps, d), append(conns, e.conn)
		}
	}
	return exps, conns
}

// forget drops freed memory.
func (r *remoteMemory) forget(m *Mem) {
	r.mu.Lock()
	delete(r.mems, m)
	r.mu.Unlock()
}

// close refuses new memory and exposures.
func (r *remoteMemory) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// freeAll frees the memory left, for the context's Close once its peers
// are disconnected and its requests complete.
func (r *remoteMemory) freeAll() {
	r.mu.Lock()
	mems := slices.Collect(maps.Keys(r.mems))
	r.mu.Unlock()
	for _, m := range mems {
		m.freeOnClose()
	}
}

// Bytes is the memory. It stays valid until Free, or the context's Close.
func (m *Mem) Bytes() []byte { return m.buf }

// Free ends every registration of the memory (its exposures included: later
// accesses by peers fail) and releases it. It never waits: while an
// operation of this side uses the memory (a Write, WriteNotify or Read, a
// request started with IWrite or IRead and not complete), it fails at once
// with ErrMemBusy and changes nothing; and when a transfer gave up on its
// work request (the device may still move the memory's bytes until that
// connection's queue pair is gone) it ends the exposures, fails with
// ErrMemBusy and keeps the memory. Either way the memory stays valid and
// the caller's, to free again later. A peer's access under way is cut off,
// not waited for (the dereg fence: see Unexpose), so the memory is unmapped
// only once nothing can touch it. Freeing twice is a no-op.
func (m *Mem) Free() error {
	m.mu.Lock()
	switch {
	case m.freed:
		m.mu.Unlock()
		return nil
	case m.users > 0 || m.freeing:
		m.mu.Unlock()
		return fmt.Errorf("capi: free: %w", ErrMemBusy)
	}
	m.freeing = true
	m.mu.Unlock()
	exps, conns := m.owner.endExposures(m)
	// The exposures end first, whatever happens to the memory: the
	// Buffer's Free, which would end them too, changes nothing while a
	// transfer that gave up on its WR holds the Buffer (until that
	// connection's queue pair is gone; a failed peer's connection is
	// closed at once).
	var first error
	for i, d := range exps {
		if err := conns[i].Unexpose(rdma.Desc(d)); err != nil && !errors.Is(err, net.ErrClosed) && first == nil {
			first = err
		}
	}
	err := m.mem.Free()
	m.mu.Lock()
	m.freeing = false
	m.freed = err == nil
	m.mu.Unlock()
	if err == nil {
		m.owner.forget(m)
	} else {
		if errors.Is(err, syscall.EBUSY) {
			err = fmt.Errorf("%w: %w", ErrMemBusy, err)
		}
		first = err
	}
	if first != nil {
		return fmt.Errorf("capi: free: %w", first)
	}
	return nil
}

// use checks that m is the context's own live memory and holds it for an
// operation; the caller calls m.unuse when done.
func (r *remoteMemory) use(op string, m *Mem) error {
	if m == nil {
		return fmt.Errorf("capi: %s: %w: memory is nil", op, ErrInvalidArgument)
	}
	if m.owner != r {
		return fmt.Errorf("capi: %s: %w: the memory belongs to another context", op, ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.freed || m.freeing {
		return fmt.Errorf("capi: %s: %w", op, ErrMemFreed)
	}
	m.users++
	return nil
}

// freeOnClose is Free for the context's Close, whose peers are all
// disconnected: the operations that still use the memory are failing
// (their connections are closed) and let it go within moments, so it
// waits for them, a bounded while.
func (m *Mem) freeOnClose() error {
	for end := time.Now().Add(5 * time.Second); ; {
		err := m.Free()
		if !errors.Is(err, ErrMemBusy) || time.Now().After(end) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// unuse ends a use.
func (m *Mem) unuse() {
	m.mu.Lock()
	m.users--
	m.mu.Unlock()
}

// span checks that off and n name a range of size bytes.
func span(op, what string, off, n, size int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("capi: %s: %w: %d bytes at offset %d exceed the %d bytes of %s", op, ErrInvalidArgument, n, off, size, what)
	}
	return nil
}

// Expose registers n bytes of m at offset off for peer idx with access and
// returns their descriptor, for that peer only. Unexpose (or Free) ends it.
func (c *Context) Expose(idx int, m *Mem, off, n int, access Access) (Desc, error) {
	return c.remote.expose(idx, m, off, n, access)
}

func (r *remoteMemory) expose(idx int, m *Mem, off, n int, access Access) (Desc, error) {
	const op = "expose"
	var d Desc
	if access&^(AccessRead|AccessWrite) != 0 || access == 0 {
		return d, fmt.Errorf("capi: %s: %w: access %d is not AccessRead, AccessWrite or both", op, ErrInvalidArgument, access)
	}
	if err := r.use(op, m); err != nil {
		return d, err
	}
	defer m.unuse()
	if n == 0 {
		return d, fmt.Errorf("capi: %s: %w: length is 0", op, ErrInvalidArgument)
	}
	if err := span(op, "the memory", off, n, len(m.buf)); err != nil {
		return d, err
	}
	p, conn, err := r.connOf(op, idx)
	if err != nil {
		return d, err
	}
	rd, err := conn.Expose(m.mem, off, n, rdma.Access(access))
	if err != nil {
		return d, p.ioError(op, err)
	}
	d = Desc(rd)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		conn.Unexpose(rd)
		return Desc{}, fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	r.exposures[d] = &exposure{mem: m, conn: conn}
	r.mu.Unlock()
	return d, nil
}

// Unexpose ends the exposure d, which Expose on this context returned:
// later accesses by the peer fail. Once it returns nothing touches the
// bytes for that exposure any more, even for an access the peer had under
// way: such an access finished before, or fails at the peer (ErrRemoteAccess
// or a broken connection). A stalled peer cannot make Unexpose wait.
func (c *Context) Unexpose(d Desc) error { return c.remote.unexpose(d) }

func (r *remoteMemory) unexpose(d Desc) error {
	const op = "unexpose"
	if _, err := onesided.Parse(d[:]); err != nil {
		return fmt.Errorf("capi: %s: %w", op, err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("capi: %s: %w", op, ErrClosed)
	}
	e := r.exposures[d]
	if e == nil {
		r.mu.Unlock()
		return fmt.Errorf("capi: %s: %w: not a live exposure of this context", op, ErrBadDesc)
	}
	delete(r.exposures, d)
	r.mu.Unlock()
	// A closed connection ended the exposure already.
	if err := e.conn.Unexpose(rdma.Desc(d)); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("capi: %s: %w", op, err)
	}
	return nil
}

// connOf returns live peer idx and its connection, when that has a queue
// pair.
func (r *remoteMemory) connOf(op string, idx int) (*peer, *rdma.Conn, error) {
	p, err := r.peers.live(op, idx)
	if err != nil {
		return nil, nil, err
	}
	conn, ok := p.conn.(*rdma.Conn)
	if !ok {
		return nil, nil, fmt.Errorf("capi: %s peer %d: %w", op, idx, ErrNotSupported)
	}
	return p, conn, nil
}

// Write writes n bytes of local at localOff to the range remote describes,
// at remoteOff, and returns n once the peer's device has them.
func (c *Context) Write(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int) (int, error) {
	return c.WriteTimeout(idx, remote, remoteOff, local, localOff, n, -1)
}

// WriteTimeout is Write that waits at most timeout (negative: no limit) to
// be posted (for a send slot): ErrTimeout then, nothing written. Once
// posted, a write runs to its completion, which the transport's retry
// timeout bounds.
func (c *Context) WriteTimeout(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int, timeout time.Duration) (int, error) {
	return c.remote.do(kindWrite, idx, remote, remoteOff, local, localOff, n, 0, timeout)
}

// WriteNotify is Write, and the peer's WaitNotify then returns value (at
// most NotifyValueMax) and n.
func (c *Context) WriteNotify(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int, value uint32) (int, error) {
	return c.WriteNotifyTimeout(idx, remote, remoteOff, local, localOff, n, value, -1)
}

// WriteNotifyTimeout is WriteNotify that waits at most timeout (negative:
// no limit) for the peer's credit, which the peer returns only as its
// WaitNotify takes notifications: ErrTimeout then, nothing written.
func (c *Context) WriteNotifyTimeout(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int, value uint32, timeout time.Duration) (int, error) {
	if value > NotifyValueMax {
		return -1, fmt.Errorf("capi: write to peer %d: %w: notification value %d exceeds %d", idx, ErrInvalidArgument, value, NotifyValueMax)
	}
	return c.remote.do(kindWriteNotify, idx, remote, remoteOff, local, localOff, n, value, timeout)
}

// Read reads n bytes of the range remote describes, at remoteOff, into
// local at localOff, and returns n.
func (c *Context) Read(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int) (int, error) {
	return c.ReadTimeout(idx, remote, remoteOff, local, localOff, n, -1)
}

// ReadTimeout is Read that waits at most timeout (negative: no limit) to be
// posted, as WriteTimeout.
func (c *Context) ReadTimeout(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int, timeout time.Duration) (int, error) {
	return c.remote.do(kindRead, idx, remote, remoteOff, local, localOff, n, 0, timeout)
}

type oneSidedKind int

const (
	kindWrite oneSidedKind = iota
	kindWriteNotify
	kindRead
)

func (k oneSidedKind) op() string {
	if k == kindRead {
		return "read from"
	}
	return "write to"
}

// oneSidedOp is a one-sided operation whose arguments were checked.
type oneSidedOp struct {
	kind   oneSidedKind
	p      *peer
	conn   *rdma.Conn
	remote rdma.Desc
	off    int
	buf    []byte // nil: nothing to move
	local  *Mem   // held (use) until release; nil when there is none
	value  uint32
	// ctx bounds the wait to be posted, when not nil (timeout's).
	ctx     context.Context
	timeout time.Duration
}

// do runs a one-sided operation and returns its length.
func (r *remoteMemory) do(kind oneSidedKind, idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int, value uint32, timeout time.Duration) (int, error) {
	o, err := r.prepare(kind, idx, remote, remoteOff, local, localOff, n, value)
	if err != nil {
		return -1, err
	}
	defer o.release()
	if timeout >= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		o.ctx, o.timeout = ctx, timeout
	}
	return o.run()
}

// prepare checks a one-sided operation's arguments in capi's terms (the
// connection checks the descriptor again, as a Desc, when it runs) and
// holds its local memory until release.
func (r *remoteMemory) prepare(kind oneSidedKind, idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int, value uint32) (oneSidedOp, error) {
	op := kind.op()
	if remote == nil {
		return oneSidedOp{}, fmt.Errorf("capi: %s peer %d: %w: descriptor is nil", op, idx, ErrInvalidArgument)
	}
	d, err := onesided.Parse(remote[:])
	if err != nil {
		return oneSidedOp{}, fmt.Errorf("capi: %s peer %d: %w", op, idx, err)
	}
	if remoteOff < 0 || n < 0 {
		return oneSidedOp{}, fmt.Errorf("capi: %s peer %d: %w: negative offset or length", op, idx, ErrInvalidArgument)
	}
	want := onesided.AccessWrite
	if kind == kindRead {
		want = onesided.AccessRead
	}
	if _, err := d.Check(uint64(remoteOff), uint64(n), want); err != nil {
		return oneSidedOp{}, fmt.Errorf("capi: %s peer %d: %w", op, idx, err)
	}
	p, conn, err := r.connOf(op, idx)
	if err != nil {
		return oneSidedOp{}, err
	}
	o := oneSidedOp{kind: kind, p: p, conn: conn, remote: rdma.Desc(*remote), off: remoteOff, value: value}
	if n == 0 && local == nil {
		return o, nil
	}
	if err := r.use(op, local); err != nil {
		return oneSidedOp{}, err
	}
	if err := span(op, "the local memory", localOff, n, len(local.buf)); err != nil {
		local.unuse()
		return oneSidedOp{}, err
	}
	o.local = local
	o.buf = local.buf[localOff : localOff+n]
	return o, nil
}

// release lets the local memory go (Free fails with ErrMemBusy before).
func (o *oneSidedOp) release() {
	if o.local != nil {
		o.local.unuse()
		o.local = nil
	}
}

// run performs o on its connection and returns its length.
func (o *oneSidedOp) run() (int, error) {
	var err error
	switch {
	case o.ctx != nil && o.kind == kindRead:
		err = o.conn.ReadRemoteContext(o.ctx, o.remote, o.off, o.buf)
	case o.ctx != nil && o.kind == kindWriteNotify:
		err = o.conn.WriteRemoteNotifyContext(o.ctx, o.remote, o.off, o.buf, o.value)
	case o.ctx != nil:
		err = o.conn.WriteRemoteContext(o.ctx, o.remote, o.off, o.buf)
	case o.kind == kindRead:
		err = o.conn.ReadRemote(o.remote, o.off, o.buf)
	case o.kind == kindWriteNotify:
		err = o.conn.WriteRemoteNotify(o.remote, o.off, o.buf, o.value)
	default:
		err = o.conn.WriteRemote(o.remote, o.off, o.buf)
	}
	if err != nil {
		if o.ctx != nil && errors.Is(err, context.DeadlineExceeded) {
			return -1, fmt.Errorf("capi: %s peer %d: %w (after %v)", o.kind.op(), o.p.idx, ErrTimeout, o.timeout)
		}
		return -1, o.p.ioError(o.kind.op(), err)
	}
	return len(o.buf), nil
}

// IWrite starts Write and returns at once; the request's result is
// Write's. local belongs to the request until it completes.
func (c *Context) IWrite(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int) (*Request, error) {
	return c.remote.start(kindWrite, idx, remote, remoteOff, local, localOff, n)
}

// IRead starts Read and returns at once; the request's result is Read's.
func (c *Context) IRead(idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int) (*Request, error) {
	return c.remote.start(kindRead, idx, remote, remoteOff, local, localOff, n)
}

// start runs a one-sided operation as a request. Requests of one peer are
// not ordered among themselves: each completes when its own WR does.
func (r *remoteMemory) start(kind oneSidedKind, idx int, remote *Desc, remoteOff int, local *Mem, localOff, n int) (*Request, error) {
	o, err := r.prepare(kind, idx, remote, remoteOff, local, localOff, n, 0)
	if err != nil {
		return nil, err
	}
	release := o.release // run and cancel are exclusive: it runs once
	req, err := r.requests.start("i"+kind.op(), o.p, nil, func() (int, error) {
		defer release()
		return o.run()
	}, release)
	if err != nil {
		release()
	}
	return req, err
}

// WaitNotify waits for the next notification from peer idx (WriteNotify's
// on its side), for at most timeout (negative: no limit), and returns its
// value and the length of its write.
func (c *Context) WaitNotify(idx int, timeout time.Duration) (uint32, int, error) {
	return c.remote.waitNotify(idx, timeout)
}

func (r *remoteMemory) waitNotify(idx int, timeout time.Duration) (uint32, int, error) {
	const op = "wait notify from"
	p, conn, err := r.connOf(op, idx)
	if err != nil {
		return 0, -1, err
	}
	ctx := context.Background()
	if timeout >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	v, n, err := conn.WaitNotify(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, -1, fmt.Errorf("capi: %s peer %d: %w (after %v)", op, idx, ErrTimeout, timeout)
		}
		return 0, -1, p.ioError(op, err)
	}
	return v, n, nil
}
