package streamconn

import (
	"fmt"
	"net"

	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/verbs"
)

// Exposures: the ranges of Buffers a connection exposed to its peer
// (internal/onesided's Exposures), until Unexpose, the Buffer's Free (or
// its BufferPool.Put) or the connection's release.

// Expose registers n bytes of b at offset off on the connection for the
// peer to access (access: the public rdma.Access, onesided.AccessRead,
// AccessWrite or both or'ed) and returns their Desc, which only this
// connection's peer can use. The exposure ends with Unexpose, b's Free or
// the connection's Close, whichever comes first.
func (c remoteOps) Expose(b *Buffer, off, n int, access int) (Desc, error) {
	const op = "expose"
	var d Desc
	switch {
	case access <= 0 || access&^int(onesided.AccessRead|onesided.AccessWrite) != 0:
		return d, c.Core.OpErr(op, invalid("access %d is not AccessRead, AccessWrite or both", access))
	case b == nil:
		return d, c.Core.OpErr(op, invalid("nil Buffer"))
	case off < 0 || n <= 0 || off > len(b.buf) || n > len(b.buf)-off:
		return d, c.Core.OpErr(op, invalid("%d bytes at offset %d are not a non-empty range of the Buffer's %d", n, off, len(b.buf)))
	}
	if err := b.acquire(); err != nil {
		return d, c.Core.OpErr(op, err)
	}
	defer b.release()
	a, va := onesided.Access(access), verbs.Access(0) // access is checked
	if a&onesided.AccessWrite != 0 {
		va |= verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	if a&onesided.AccessRead != 0 {
		va |= verbs.AccessRemoteRead
	}
	var id uint32
	mr, err := c.regs().regMR(b, b.buf[off:off+n], va, func(zc *zeroCopy, mr verbs.MR) verbs.MR {
		id = zc.exposures.Add(b, mr)
		return mr
	})
	if err != nil {
		return d, c.Core.OpErr(op, err)
	}
	onesided.Desc{Access: a, Addr: mr.Addr(), Len: uint64(n), RKey: mr.RKey(), ID: id}.Marshal(d[:])
	c.Core.Counters.Exposures.Add(1)
	return d, nil
}

// Unexpose ends the exposure d, which Expose on this connection returned.
// Once it returns, nothing touches the range for the peer any more, even
// for an access the peer had under way: that access finished before, or
// fails at the peer (ErrRemoteAccess, or its connection broken). A stalled
// peer cannot make Unexpose wait. A Desc that is not a live exposure of
// this connection fails with onesided.ErrDesc.
func (c remoteOps) Unexpose(d Desc) error {
	const op = "unexpose"
	pd, err := onesided.Parse(d[:])
	if err != nil {
		return c.Core.OpErr(op, err)
	}
	// Deregistered under mu, so that Close's release finds every exposure
	// either gone or its own before the protection domain goes. The
	// provider's dereg fence bounds the wait by memory copies in
	// progress, never by the peer.
	c.Core.Mu.Lock()
	defer c.Core.Mu.Unlock()
	var e onesided.Exposure[*Buffer]
	ok := false
	if c.ZC != nil {
		e, ok = c.ZC.exposures.Take(pd)
	}
	if !ok {
		if c.Core.Closed || c.Core.Torn {
			return c.Core.OpErr(op, net.ErrClosed)
		}
		return c.Core.OpErr(op, fmt.Errorf("%w: not a live exposure of this connection", onesided.ErrDesc))
	}
	if err := e.MR.Dereg(); err != nil {
		return c.Core.OpErr(op, err)
	}
	c.ZC.forgetIfUnused(e.Buf, c.Conn)
	return nil
}
