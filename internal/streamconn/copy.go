package streamconn

import (
	"io"
	"net"
	"os"

	"github.com/rdmanet/rdma/verbs"
)

// io.ReaderFrom and io.WriterTo, so that io.Copy to or from a Conn (file
// serving, proxies) skips its own intermediate buffer: ReadFrom reads the
// source straight into the connection's registered send buffer and posts
// the bytes from there; WriteTo hands the destination the bytes where
// they landed in the receive ring (or where a rendezvous READ put them),
// then credits them back.

var (
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
)

// copying is the part of ReadFrom and WriteTo that reaches into the send
// buffer and the rendezvous' bounce buffer directly.
type copying struct{ *Conn }

func (c *Conn) copying() copying { return copying{c} }

// ReadFrom implements io.ReaderFrom: it reads r until io.EOF (or an error)
// into the connection's send buffer, a chunk at a time, and writes what it
// read as Write would, without copying it again. It returns the bytes
// written; an error of r's is returned as it is, one of the connection's as
// Write's would be.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.Core.WriteMu.Lock()
	defer c.Core.WriteMu.Unlock()
	var total int64
	for {
		buf, err := c.copying().sendSpace()
		if err != nil {
			return total, err
		}
		// The space is the writer's (wmu) until reserved: nobody else
		// reserves send buffer bytes, and completions only free more.
		k, rerr := r.Read(buf)
		if k > 0 {
			if err := c.copying().postRead(buf[:k]); err != nil {
				return total, err
			}
			total += int64(k)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// sendSpace waits until a chunk's worth of the send buffer is free in a
// row at the write position, and returns it (not yet reserved).
func (c copying) sendSpace() ([]byte, error) {
	for {
		c.Core.Mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.Core.Mu.Unlock()
			return nil, c.Core.OpErr("write", err)
		}
		want := uint64(c.chunk)
		free, contig := c.SB.Room()
		if free < want && c.Growing().growSendLocked() { // ringgrowth.go
			free, contig = c.SB.Room()
		}
		if contig < want && free >= contig+want {
			// Skip the buffer's tail, as reserveLocked does.
			c.SB.Pad(contig)
			free, contig = c.SB.Room()
		}
		if contig >= want && free >= want {
			buf := c.SB.Next(want)
			c.Core.Mu.Unlock()
			return buf, nil
		}
		c.send().awaitRoomLocked()
		c.send().unlockSubmit()
		c.awaitRoom()
	}
}

// postRead writes p, which ReadFrom read into the send buffer at its write
// position, as Write writes what it copied there.
func (c copying) postRead(p []byte) error {
	first := true // each piece ReadFrom read counts as a Write (internal/connstats)
	for len(p) > 0 {
		c.Core.Mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.Core.Mu.Unlock()
			return c.Core.OpErr("write", err)
		}
		n, at, inline := c.send().reserveLocked(len(p))
		if n == 0 {
			c.send().unlockSubmit() // a probe reserveLocked queued
			c.awaitRoom()
			continue
		}
		if inline {
			// A sliver that goes inline takes no send buffer room: the
			// rest moves down to the write position.
			buf := c.send().inlineSlotLocked(n)
			copy(buf, p[:n])
			c.send().enqueueDataLocked(buf, at, verbs.SendInline, first)
			first = false
			p = p[:copy(p, p[n:])]
		} else {
			// reserveLocked reserved the bytes where p starts: the space
			// was free in a row (sendSpace), so it padded nothing.
			c.SB.Reserve(uint64(n))
			c.send().enqueueDataLocked(p[:n], at, 0, first)
			first = false
			p = p[n:]
		}
		c.send().unlockSubmit()
	}
	return nil
}

// WriteTo implements io.WriterTo: it writes everything the peer sends to w
// until the peer's FIN (then it returns nil, as io.Copy expects) or an
// error, handing w the bytes in the receive ring itself.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.Core.ReadMu.Lock()
	defer c.Core.ReadMu.Unlock()
	var total int64
	for {
		c.Core.Mu.Lock()
		if c.Core.Closed {
			c.Core.Mu.Unlock()
			return total, c.Core.OpErr("read", net.ErrClosed)
		}
		if c.Core.ReadDL.Passed() {
			c.Core.Mu.Unlock()
			return total, c.Core.OpErr("read", os.ErrDeadlineExceeded)
		}
		if zc := c.ZC; zc != nil && zc.bounce.Pending() {
			c.Core.Mu.Unlock()
			n, err := w.Write(zc.bounce.Unread())
			zc.bounce.Consumed(n)
			c.CountRead(n) // each hand-over counts as a Read
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
		}
		if c.RX.Buffered() > 0 {
			ring, off, span := c.readRingLocked()
			c.Core.Mu.Unlock()
			// The bytes are ours until credited back (Read's rule).
			n, err := w.Write(ring[off : off+min(span, uint64(len(ring))-off)])
			c.Core.Mu.Lock()
			c.RX.Consume(n)
			if n > 0 {
				c.Core.Counters.ReadLocked(n)
			}
			c.leftPrevRingLocked()
			c.send().creditLocked(false)
			c.send().unlockSubmit()
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
		}
		if addr, key, left := c.RX.RndvNext(); left > 0 {
			c.Core.Mu.Unlock()
			// Into the bounce buffer; the next turn hands it to w.
			bounce, err := c.rndv().bounceBuf()
			if err != nil {
				return total, c.Core.OpErr("read", err)
			}
			dst := bounce.Space(left)
			if err := c.rndv().readRemote(bounce.MR(), dst, addr, key); err != nil {
				return total, err
			}
			bounce.Landed(0, len(dst)) // reader-owned (rmu)
			continue
		}
		if c.RX.FinRcvd {
			c.Core.Mu.Unlock()
			return total, nil
		}
		if c.Core.Err != nil {
			err := c.Core.Err
			c.Core.Mu.Unlock()
			return total, c.Core.OpErr("read", err)
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.RcvReady, &c.Core.ReadDL, false)
	}
}
