package rdma

import (
	"fmt"
	"net"

	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/verbs"
)

// Exposures: the ranges of Buffers a connection exposed to its peer
// (Expose), each registered on the connection's protection domain for the
// peer's access and named by a number its Desc carries, until Unexpose,
// the Buffer's Free (or its BufferPool.Put) or the connection's release.

// exposure is a range of a Buffer exposed to the peer.
type exposure struct {
	buf *Buffer
	mr  verbs.MR
}

// exposureTable is a connection's live exposures by number, and the last
// number given. The connection's mu guards it.
type exposureTable struct {
	byID map[uint32]exposure
	last uint32
}

// add records b's range registered as mr and returns its number: never 0,
// unique among the live exposures. A number is reused only after it wrapped
// around; a stale Desc that names it is told apart by its rkey, address
// and length (take).
func (t *exposureTable) add(b *Buffer, mr verbs.MR) uint32 {
	if t.byID == nil {
		t.byID = map[uint32]exposure{}
	}
	for {
		t.last++
		if _, used := t.byID[t.last]; !used && t.last != 0 {
			break
		}
	}
	t.byID[t.last] = exposure{buf: b, mr: mr}
	return t.last
}

// take removes and returns the live exposure d describes, which must match
// it in number, rkey, address and length; false (and nothing removed) for
// any other Desc. The caller deregisters it.
func (t *exposureTable) take(d onesided.Desc) (exposure, bool) {
	e := t.byID[d.ID]
	if e.mr == nil || e.mr.RKey() != d.RKey || e.mr.Addr() != d.Addr || uint64(e.mr.Len()) != d.Len {
		return exposure{}, false
	}
	delete(t.byID, d.ID)
	return e, true
}

// endFor ends every exposure of b: once it returns, the dereg fence makes
// sure no access of the peer's touches b's memory.
func (t *exposureTable) endFor(b *Buffer) {
	for id, e := range t.byID {
		if e.buf == b {
			delete(t.byID, id)
			e.mr.Dereg()
		}
	}
}

// holds reports whether b has a live exposure.
func (t *exposureTable) holds(b *Buffer) bool {
	for _, e := range t.byID {
		if e.buf == b {
			return true
		}
	}
	return false
}

// live is the number of live exposures (Stats.Exposed).
func (t *exposureTable) live() int { return len(t.byID) }

// release ends every exposure: deregisters them all, then calls forget for
// each one's Buffer. The table is empty afterwards.
func (t *exposureTable) release(forget func(*Buffer)) {
	for _, e := range t.byID {
		e.mr.Dereg()
	}
	for _, e := range t.byID {
		forget(e.buf)
	}
	t.byID = nil
}

// Expose registers n bytes of b at offset off on the connection for the
// peer to access (access: AccessRead, AccessWrite or both) and returns
// their Desc, which only this connection's peer can use. The exposure ends
// with Unexpose, b's Free or the connection's Close, whichever comes first.
func (c *Conn) Expose(b *Buffer, off, n int, access Access) (Desc, error) {
	const op = "expose"
	var d Desc
	switch {
	case access <= 0 || access&^(AccessRead|AccessWrite) != 0:
		return d, c.opErr(op, invalid("access %d is not AccessRead, AccessWrite or both", int(access)))
	case b == nil:
		return d, c.opErr(op, invalid("nil Buffer"))
	case off < 0 || n <= 0 || off > len(b.buf) || n > len(b.buf)-off:
		return d, c.opErr(op, invalid("%d bytes at offset %d are not a non-empty range of the Buffer's %d", n, off, len(b.buf)))
	}
	if err := b.acquire(); err != nil {
		return d, c.opErr(op, err)
	}
	defer b.release()
	va := verbs.Access(0)
	if access&AccessWrite != 0 {
		va |= verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	if access&AccessRead != 0 {
		va |= verbs.AccessRemoteRead
	}
	var id uint32
	mr, err := c.regMR(b, b.buf[off:off+n], va, func(zc *zeroCopy, mr verbs.MR) verbs.MR {
		id = zc.exposures.add(b, mr)
		return mr
	})
	if err != nil {
		return d, c.opErr(op, err)
	}
	onesided.Desc{Access: onesided.Access(access), Addr: mr.Addr(), Len: uint64(n), RKey: mr.RKey(), ID: id}.Marshal(d[:])
	c.stats.exposures.Add(1)
	return d, nil
}

// Unexpose ends the exposure d, which Expose on this connection returned.
// Once it returns, nothing touches the range for the peer any more, even
// for an access the peer had under way: that access finished before, or
// fails at the peer (ErrRemoteAccess, or its connection broken). A stalled
// peer cannot make Unexpose wait. A Desc that is not a live exposure of
// this connection fails with ErrBadDesc.
func (c *Conn) Unexpose(d Desc) error {
	const op = "unexpose"
	pd, err := onesided.Parse(d[:])
	if err != nil {
		return c.opErr(op, err)
	}
	// Deregistered under mu, so that Close's release finds every exposure
	// either gone or its own before the protection domain goes. The
	// provider's dereg fence bounds the wait by memory copies in
	// progress, never by the peer.
	c.mu.Lock()
	defer c.mu.Unlock()
	var e exposure
	ok := false
	if c.zc != nil {
		e, ok = c.zc.exposures.take(pd)
	}
	if !ok {
		if c.closed || c.torn {
			return c.opErr(op, net.ErrClosed)
		}
		return c.opErr(op, fmt.Errorf("%w: not a live exposure of this connection", ErrBadDesc))
	}
	if err := e.mr.Dereg(); err != nil {
		return c.opErr(op, err)
	}
	c.zc.forgetIfUnused(e.buf, c)
	return nil
}
