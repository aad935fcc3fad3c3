package streamconn

import (
	"net"
	"os"
	"syscall"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/internal/zerocopy"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Rendezvous (protocol version 4; internal/stream/rndv.go has the wire
// rules). A Write of at least the connection's rendezvous threshold from a
// Buffer does not copy: the writer exposes exactly those bytes for remote
// READ (a memory window bound on the connection's queue pair where the
// device has windows, rndvWindow; else a registration of its own on
// the connection's protection domain), sends their
// descriptor in the stream's order (into the peer's mailbox, immediate
// CtlRndv), and waits. The reader, once it has read every ring byte before
// the descriptor, RDMA READs the range piece by piece: straight into its
// Read's slice when that lies in a Buffer (registered on its side for
// local access), else into a registered bounce buffer it copies out of.
// Having read all of it, the reader sends CtlRndvDone; the writer
// invalidates the window or deregisters the range, which revokes the
// peer's access, and its Write returns. A Write that must give up first
// (its deadline, Close, the connection failing) revokes the range before
// it returns (deallocating the window); the peer
// may be mid-READ, so the stream cannot go on and the connection fails
// (errRndvAbandoned), on both sides.

// defaultRndvThreshold is where a Write from a Buffer switches to the
// rendezvous, unless Config.RendezvousThreshold says otherwise; see
// docs/design.md, "When a Write copies", for the measurements.
const defaultRndvThreshold = 128 << 10

// SoftRndvThreshold is soft's default. Its transports copy the bytes on
// either path, so the rendezvous saves only the copies into the send
// buffer and out of the ring, and pays a round trip and two messages more
// a Write; below 512 KiB that costs more than the copies, on both paths
// (rdmaperf -buffers against -rndv -1, one sitting, 3 rounds each:
// shared memory 256 KiB 0.91x the copying path's throughput at the same
// CPU a message, 512 KiB 1.16x at 0.8x; TCP, its waits polling the socket,
// 256 KiB 0.96x at 1.07x, 512 KiB 1.3x at 0.77x).
const SoftRndvThreshold = 512 << 10

// rndvPiece bounds one RDMA READ of a rendezvous: a Read waits for its
// READ to complete whatever its deadline says (the bytes land in its
// slice), so a piece is what may delay a deadline or a Close.
const rndvPiece = 4 << 20

// rndvDirectMin is the smallest Read slice a READ targets directly; a
// smaller one is served from the bounce buffer, a READ of many Reads'
// worth, so that tiny Reads do not each pay a round trip.
const rndvDirectMin = 16 << 10

var errRndvAbandoned = &core.Error{Msg: "a Write gave up during a rendezvous (deadline or Close): the stream cannot go on", Errno: syscall.ECONNABORTED}

// rendezvous is the connection's rendezvous part: the writer's exposure
// and wait (rndvOne, rndvwindow.go), the reader's READs (readRndv) and
// the bounce buffer (bounce.go). Its state is zeroCopy's Window, bounce
// and ctlMR; the credit and send-slot checks are the send side's.
type rendezvous struct{ *Conn }

func (c *Conn) rndv() rendezvous { return rendezvous{c} }

// RndvThreshold is the threshold for a connection of the version agreed
// (0: no rendezvous).
func (c handshake) RndvThreshold(agreed uint8) int {
	return rndvThresholdFor(c.Cfg.RendezvousThreshold, c.Prov == soft.Name, agreed)
}

// rndvThresholdFor is the threshold configured as t (Config's: 0 the
// provider's default, negative none) on soft or another provider, for the
// version agreed.
func rndvThresholdFor(t int, soft bool, agreed uint8) int {
	if agreed < stream.VersionRndv || t < 0 {
		return 0
	}
	switch {
	case t > 0:
		return max(t, zerocopy.RendezvousFloor())
	case soft:
		return SoftRndvThreshold
	}
	return defaultRndvThreshold
}

// directLen is how many bytes a rendezvous READ puts straight into a
// Read's slice of n bytes, in a Buffer, with left bytes of the
// rendezvous to go; 0 when the bounce buffer serves it (a small slice).
func directLen(n int, left uint64) int {
	if n < rndvDirectMin {
		return 0
	}
	return int(min(uint64(n), left, rndvPiece))
}

// writeRndv writes b, which lies in buf, by rendezvous.
func (c rendezvous) writeRndv(b []byte, buf *Buffer) (int, error) {
	if err := buf.acquire(); err != nil {
		return 0, c.Core.OpErr("write", err)
	}
	defer buf.release()
	sent := 0
	for sent < len(b) {
		n := min(len(b)-sent, stream.MaxRndvLen)
		if err := c.rndvOne(b[sent:sent+n], buf); err != nil {
			return sent, err
		}
		c.Core.Mu.Lock()
		c.Core.Counters.WroteLocked(n, sent == 0)
		c.Core.Mu.Unlock()
		sent += n
	}
	return sent, nil
}

// rndvOne exposes p (in buf) to the peer, announces it and waits until the
// peer has read it all; p's registration is gone when it returns.
func (c rendezvous) rndvOne(p []byte, buf *Buffer) error {
	ctl, err := c.regs().zeroCopy().ctl(c.EP.PD, c.ctlStagingBytes())
	if err != nil {
		return c.Core.OpErr("write", err)
	}
	x, err := c.exposeRndv(p, buf)
	if err != nil {
		return c.Core.OpErr("write", err)
	}
	for {
		c.Core.Mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.Core.Mu.Unlock()
			c.revokeRndv(x, true)
			return c.Core.OpErr("write", err)
		}
		// As a data write: one credit stays for the credit message. A
		// bind takes a send slot more.
		if c.CanSendData() && (x.MW == nil || c.SQ.Used()+1 < c.SQ.Depth) {
			break
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.SndReady, &c.Core.WriteDL, false)
	}
	key := c.announceLocked(&x, p)
	msg := c.ctlStagingBytes()[:stream.RndvMsgLen]
	stream.RndvMsg{Addr: verbs.AddrOf(p), Len: uint32(len(p)), Key: key}.Marshal(msg)
	// Into the mailbox of the ring the peer reads now (a ring it offered
	// and we have not moved to yet is not read until our next data write,
	// which comes after this rendezvous).
	c.enqueueWRLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlRndv), ctl, msg,
		c.TX.Addr+c.TX.Size+stream.RndvMsgAt, c.TX.RKey, 0, false)
	c.TX.RndvSent()
	c.Core.TalkedLocked()
	c.Core.Counters.RndvSent++
	if x.MW != nil {
		c.Core.Counters.RndvWindowed++
	}
	c.send().unlockSubmit()
	for {
		c.Core.Mu.Lock()
		if !c.TX.Rndv.Out {
			c.Core.Mu.Unlock()
			c.revokeRndv(x, false)
			return nil
		}
		if err := c.writeErrLocked(); err != nil {
			abandon := c.Core.Err == nil
			if abandon {
				c.FailLocked(errRndvAbandoned)
			}
			c.Core.Mu.Unlock()
			// Revoked before the Write returns; a READ the peer has under
			// way fails with a remote access error.
			c.revokeRndv(x, true)
			if abandon {
				_ = c.EP.ID.Disconnect()
			}
			// A READ response the provider queued before the revocation
			// may still be on its way out of p: Free must not unmap buf
			// until the queue pair is gone (ErrBufferBusy until Close).
			c.regs().holdUntilTeardown(buf)
			return c.Core.OpErr("write", err)
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.SndReady, &c.Core.WriteDL, false)
	}
}

// readRndv reads the next piece of the pending rendezvous (left bytes at
// the peer's addr under key) into b (len(b) > 0). Called with rmu held.
func (c rendezvous) readRndv(b []byte, addr uint64, key uint32, left uint64) (int, error) {
	var dst []byte
	var mr verbs.MR
	if want := directLen(len(b), left); want > 0 {
		if buf := bufferOf(b); buf != nil && buf.acquire() == nil {
			defer buf.release()
			if m, err := c.regs().bufferMR(buf); err == nil {
				mr, dst = m, b[:want]
			}
		}
	}
	direct := mr != nil
	if !direct {
		bounce, err := c.bounceBuf()
		if err != nil {
			return 0, c.Core.OpErr("read", err)
		}
		mr, dst = bounce.MR(), bounce.Space(left)
	}
	if err := c.readRemote(mr, dst, addr, key); err != nil {
		return 0, err
	}
	if direct {
		return len(dst), nil
	}
	n := copy(b, dst)
	c.ZC.bounce.Landed(n, len(dst)) // made by bounceBuf
	return n, nil
}

// readRemote RDMA READs the next len(dst) bytes of the pending rendezvous
// (at the peer's addr) into dst (in mr) and waits for the completion,
// whatever the Read's deadline or a Close say: until it completes the
// device may write into dst, which belongs to the Read in progress. The
// wait is bounded by the transport: a peer that stops answering fails the
// READ with a retry error. When they are the rendezvous's last bytes, the
// done message is queued behind the READ, fenced (sendRndvDoneLocked).
func (c rendezvous) readRemote(mr verbs.MR, dst []byte, addr uint64, key uint32) error {
	for {
		c.Core.Mu.Lock()
		if c.Core.Err != nil {
			err := c.Core.Err
			c.Core.Mu.Unlock()
			return c.Core.OpErr("read", err)
		}
		if c.Core.Closed {
			c.Core.Mu.Unlock()
			return c.Core.OpErr("read", net.ErrClosed)
		}
		if c.Core.ReadDL.Passed() {
			c.Core.Mu.Unlock()
			return c.Core.OpErr("read", os.ErrDeadlineExceeded)
		}
		if c.SQ.HasRoom() {
			break
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.SndReady, &c.Core.ReadDL, false)
	}
	// One READ for the piece. Split into several READs in flight it was
	// no faster on soft's shared memory (the responder's copy into the
	// ring and ours out of it overlap within one response) and slower on
	// soft's TCP path (rdmaperf -buffers, 4 MiB: 256 KiB READs 1862 MiB/s,
	// 1 MiB READs 2021, one READ 2418; medians of 5 interleaved rounds);
	// on rxe a single 1 MiB READ (ReadRemote) runs at 0.92x ib_read_bw.
	r := sendq.NewOp()
	c.SQ.Ops[c.enqueueWRLocked(verbs.OpRDMARead, 0, mr, dst, addr, key, 0, true)] = r
	// The bytes count as read now (if the READ fails, so does the
	// connection): the done message may then go in this post, and the
	// peer's next descriptor, which may follow the done before this READ's
	// completion is taken, finds the rendezvous over.
	if c.RX.RndvRead(uint64(len(dst))) {
		c.rndvDoneDue = true
		c.sendRndvDoneLocked()
	}
	c.send().unlockSubmit()
	disconnected := false
	for {
		c.Core.Mu.Lock()
		if r.Done {
			st := r.Status
			c.Core.Mu.Unlock()
			r.Recycle()
			if st != verbs.WCSuccess {
				return c.Remote().remoteStatus("read", st)
			}
			return nil
		}
		failed := c.Core.Err != nil
		c.Core.Mu.Unlock()
		if failed && !disconnected {
			// A failed connection's QP flushes what is outstanding; make
			// sure it is failing, not just marked so (a heartbeat's
			// verdict leaves the QP up).
			_ = c.EP.ID.Disconnect()
			disconnected = true
		}
		c.Await(c.Core.SndReady, nil, true)
	}
}

// sendRndvDoneLocked sends the done message of the rendezvous read to its
// end, once a message credit (beyond the one kept for credit messages)
// and a send slot are free; completions retry it (handle). It is queued
// when the last READ is, and fenced: the QP starts it only once the READs
// before it have completed, so the writer, which revokes its range and
// lets its Write return on the done, never does so under a READ that is
// still taking bytes; and the done leaves as the READ completes, without
// waiting for the reader to be woken by the completion and post it (in
// the Soft-RoCE guest, 1 MiB from and into Buffers: 1.03x the throughput
// of a done posted after the completion; docs/design.md).
func (c rendezvous) sendRndvDoneLocked() {
	if !c.rndvDoneDue || c.Core.Err != nil || c.Core.Torn {
		return
	}
	if !c.CanSendData() {
		return
	}
	c.send().enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlRndvDone), nil, c.TX.Addr, verbs.SendFence, false)
	c.TX.Spend()
	c.rndvDoneDue = false
	c.Core.TalkedLocked()
}
