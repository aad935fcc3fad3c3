// Package rsocketconn is the engine of the rsocket wire (rdma.RsocketConn,
// Config.Wire = "rsocket"): rdma-core's rsockets protocol over one verbs
// endpoint, on the connection core both wires share (internal/core) and
// the net.Conn face (internal/connface). The protocol's rules (messages,
// credits, regions) are internal/rsocket's; this package posts, polls and
// applies them. The public type is a face of a few lines over Conn.
package rsocketconn

import (
	"io"
	"net"
	"runtime"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/connface"
	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/rsocket"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Params are a connection's sizes in rsocket mode: rsocket.c's defaults
// (rbuf and send buffer 128 KiB, 384-deep queues, 64 bytes inline) unless
// the Config sets them (the root package's rsocketParams).
type Params struct {
	RbufSize, SbufSize int
	SQSize, RQSize     int
	Inline             int
	KeepAlive          time.Duration
	HandshakeTimeout   time.Duration
	PollTime           time.Duration // Config.PollTime, resolved as rdma.Conn takes it
	BusyPoll           func() bool   // Config.BusyPoll or its environment variable, asked at start
	TrafficClass       int           // Config.TrafficClass, for the dial (a listener has its own)

	// Addr is a connection manager address as the public package shows
	// it (its *Addr; nil for none).
	Addr func(*net.TCPAddr) net.Addr
}

// Conn is one connection of the rsocket wire: its face and shared core
// (connface.Face, whose Core.Mu guards the fields below it marks so, and
// posting), its verbs endpoint and the protocol's state. Reads are
// serialised among themselves, Writes too; a Read and a Write run in
// parallel.
type Conn struct {
	connface.Face
	p Params

	// The verbs resources (internal/core): RingMR holds the target SGL
	// and the rbuf, SendMR the send buffer (sbuf) and the control
	// staging; inline is the largest send sent inline.
	ep     core.Endpoint
	inline int

	sgl  []byte // target SGL: the peer grants regions of its rbuf here
	rbuf []byte
	sbuf []byte // the send buffer
	ctrl []byte // one SGE per control slot, for region grants
	peer rsocket.ConnData

	// Guarded by mu (Face.Core):
	tx       rsocket.Tx
	rx       rsocket.Rx
	rdShut   bool // the peer sent SHUTDOWN or DISCONNECT, or disconnected
	peerGone bool // the peer disconnected: writes fail
	wrShut   bool // this side sent SHUTDOWN
	discSent bool // this side sent DISCONNECT
	swr      [1]verbs.SendWR
	ssge     [2]verbs.SGE
	rwrs     []verbs.RecvWR
}

const rsRecvWRID = 1 << 63 // set in the WR id of every receive

// Init sets up the verbs resources on id (device known) and posts the
// receives, as rsocket.c's rs_create_ep does. On failure it releases what
// it created (not ech and id, which stay the caller's).
func (c *Conn) Init(provider string, ech verbs.EventChannel, id verbs.CMID, p Params) (err error) {
	c.p = p
	c.ep = core.Endpoint{Events: ech, ID: id}
	c.Face.Init(provider, c.poller())
	defer func() {
		if err != nil {
			c.ReleaseVerbs()
		}
	}()
	ctx, attr, err := core.DeviceOf(id)
	if err != nil {
		return err
	}
	sq, rq := core.FitQueues(attr, p.SQSize, p.RQSize, 0)
	if sq < rsocket.MinQueue || rq < rsocket.MinQueue {
		return verbs.Errorf("ibv_create_qp", 0, "device queues too small for rsocket (max WR %d, max CQE %d)", attr.MaxQPWR, attr.MaxCQE)
	}
	inline := min(p.Inline, attr.MaxInlineData)
	sglLen := rsocket.SGLSize * rsocket.SGELen
	ctrlLen := rsocket.CtrlSlots * rsocket.SGELen
	all, err := c.ep.Allocate(sglLen + p.RbufSize + p.SbufSize + ctrlLen)
	if err != nil {
		return err
	}
	recv := all[: sglLen+p.RbufSize : sglLen+p.RbufSize]
	c.sgl = recv[:sglLen:sglLen]
	c.rbuf = recv[sglLen:]
	send := all[len(recv) : len(recv)+p.SbufSize+ctrlLen]
	c.sbuf = send[:p.SbufSize:p.SbufSize]
	c.ctrl = send[p.SbufSize:]
	if err = c.ep.Register(ctx, recv, send); err != nil {
		return err
	}
	qc := verbs.QPCap{MaxSendWR: sq, MaxRecvWR: rq, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: inline}
	if err = c.ep.CreateQP(ctx, &qc); err != nil {
		return err
	}
	c.inline = min(inline, qc.MaxInlineData)
	c.p.SQSize, c.p.RQSize = sq, rq
	c.rwrs = make([]verbs.RecvWR, rq)
	for i := range c.rwrs {
		c.rwrs[i].WRID = rsRecvWRID
	}
	return c.ep.QP.PostRecv(c.rwrs)
}

// ConnData is this side's half of the handshake: no iomap, and the target
// SGL read as little-endian (so no FlagNet, whatever the host).
func (c *Conn) ConnData() []byte {
	cd := rsocket.ConnData{
		Version:   rsocket.Version,
		Credits:   uint16(c.p.RQSize),
		TargetSGL: rsocket.SGE{Addr: c.ep.RingMR.Addr(), Key: c.ep.RingMR.RKey(), Length: rsocket.SGLSize},
		DataBuf:   rsocket.FirstRegion(len(c.rbuf), c.ep.RingMR.Addr()+uint64(len(c.sgl)), c.ep.RingMR.RKey()),
	}
	b := make([]byte, rsocket.ConnDataLen)
	cd.Marshal(b)
	return b
}

// SetPeer takes in the peer's connection data.
func (c *Conn) SetPeer(peer rsocket.ConnData) {
	c.peer = peer
	c.tx.Init(peer, c.p.SQSize, len(c.sbuf))
	c.rx.Init(len(c.rbuf), c.ep.RingMR.Addr()+uint64(len(c.sgl)), c.ep.RingMR.RKey(), uint16(c.p.RQSize), peer)
}

// TakeAnswer takes in the listener's connection data.
func (c *Conn) TakeAnswer(private []byte) error {
	peer, err := rsocket.ParseConnData(private)
	if err != nil {
		return err
	}
	c.SetPeer(peer)
	return nil
}

// Start runs the connection once it is established.
func (c *Conn) Start() {
	c.Established(c.p.Addr(c.ep.ID.LocalAddr()), c.p.Addr(c.ep.ID.RemoteAddr()))
	c.Core.Mu.Lock()
	c.creditLocked() // the second half of the rbuf, at once, as rsocket.c does
	c.Core.Mu.Unlock()
	c.Core.Poll.Configure(c.p.PollTime, c.p.BusyPoll(), c.Prov == soft.Name)
	var next time.Time
	if c.p.KeepAlive > 0 {
		next = time.Now().Add(c.p.KeepAlive)
	}
	c.Core.Watch = cmwatch.Start(c.ep.Events, (*watcher)(c), next)
}

// postLocked posts one signaled send (rsocket.c signals every send); its WR
// id is the message's immediate, which is how its completion is accounted.
func (c *Conn) postLocked(op verbs.Opcode, msg uint32, sg []verbs.SGE, addr uint64, rkey uint32) error {
	if c.Core.Torn {
		return verbs.ErrClosed
	}
	flags := verbs.SendSignaled
	n := 0
	for i := range sg {
		n += int(sg[i].Length)
	}
	if n > 0 && n <= c.inline {
		flags |= verbs.SendInline
	}
	c.swr[0] = verbs.SendWR{WRID: uint64(msg), Opcode: op, Flags: flags, SG: sg, Imm: msg, RemoteAddr: addr, RKey: rkey}
	if err := c.ep.QP.PostSend(c.swr[:]); err != nil {
		c.FailLocked(err)
		return err
	}
	return nil
}

// canCtrlLocked reports whether a credit or control message may go now.
func (c *Conn) canCtrlLocked() bool {
	return c.Core.Err == nil && !c.Core.Torn && !c.peerGone && !c.discSent && c.tx.CtrlAvail()
}

// postCtrlLocked sends a control message (a zero-length write with
// immediate); the caller checked canCtrlLocked.
func (c *Conn) postCtrlLocked(code uint32) error {
	c.tx.TakeCtrl()
	return c.postLocked(verbs.OpRDMAWriteWithImm, rsocket.Msg(rsocket.OpCtrl, code), nil, c.peer.TargetSGL.Addr, c.peer.TargetSGL.Key)
}

// creditLocked returns credit, and grants free halves of the rbuf, when
// due.
func (c *Conn) creditLocked() {
	for c.rx.CreditDue() && c.canCtrlLocked() {
		slot := c.tx.TakeCtrl()
		buf := c.ctrl[slot*rsocket.SGELen : (slot+1)*rsocket.SGELen]
		cr := c.rx.TakeCredit(buf)
		var sg []verbs.SGE
		addr, key := c.peer.TargetSGL.Addr, c.peer.TargetSGL.Key
		if cr.WithSGE {
			c.ssge[0] = verbs.SGE{Addr: verbs.AddrOf(buf), Length: uint32(len(buf)), LKey: c.ep.SendMR.LKey()}
			sg = c.ssge[:1]
			addr, key = cr.Addr, cr.Key
		}
		if c.postLocked(verbs.OpRDMAWriteWithImm, cr.Imm, sg, addr, key) != nil {
			return
		}
	}
}

// TrafficClass is the traffic class (IP type of service) the connection's
// packets carry, as its queue pair reports it.
func (c *Conn) TrafficClass() (int, error) { return c.Face.TrafficClass(&c.ep) }

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has shut down its sending side (or closed, or
// disconnected) and everything before that was read.
func (c *Conn) Read(b []byte) (int, error) {
	c.Core.ReadMu.Lock()
	defer c.Core.ReadMu.Unlock()
	for {
		c.Core.Mu.Lock()
		if err := c.Core.ReadStopLocked(); err != nil {
			c.Core.Mu.Unlock()
			return 0, err
		}
		off, avail := c.rx.Buffered()
		if avail > 0 {
			if len(b) == 0 {
				c.Core.Mu.Unlock()
				return 0, nil
			}
			n := int(min(avail, uint64(len(b))))
			c.Core.Mu.Unlock()
			// The bytes are ours until consumed and credited back.
			first := min(n, len(c.rbuf)-int(off))
			copy(b, c.rbuf[off:int(off)+first])
			copy(b[first:n], c.rbuf)
			c.Core.Mu.Lock()
			c.rx.Consume(uint64(n))
			c.Core.Counters.ReadLocked(n) // internal/connstats
			c.creditLocked()
			c.Core.Mu.Unlock()
			return n, nil
		}
		if c.rdShut {
			c.Core.Mu.Unlock()
			return 0, io.EOF
		}
		if err := c.Core.Err; err != nil {
			c.Core.Mu.Unlock()
			return 0, c.Core.OpErr("read", err)
		}
		c.Core.Mu.Unlock()
		if len(b) == 0 {
			return 0, nil
		}
		c.await(c.Core.RcvReady, &c.Core.ReadDL, false)
	}
}

// Write writes b. It returns once all of b is posted (copied into
// registered memory), or with an error and the count posted before it.
func (c *Conn) Write(b []byte) (int, error) {
	c.Core.WriteMu.Lock()
	defer c.Core.WriteMu.Unlock()
	for sent := 0; ; {
		if sent == len(b) && sent > 0 {
			return sent, nil
		}
		c.Core.Mu.Lock()
		if over, err := c.Core.WriteOverLocked(c.writeErrLocked(), sent, len(b)); over {
			c.Core.Mu.Unlock()
			return sent, err
		}
		d, ok := c.tx.NextData(len(b) - sent)
		if !ok {
			c.Core.Counters.CreditWaits++
			c.Core.Mu.Unlock()
			c.poller().AwaitRoom()
			continue
		}
		c.Core.Mu.Unlock()
		// The reserved send buffer bytes are this writer's alone.
		p := b[sent : sent+int(d.N)]
		first := min(len(p), len(c.sbuf)-int(d.Off))
		copy(c.sbuf[d.Off:], p[:first])
		copy(c.sbuf, p[first:])
		c.Core.Mu.Lock()
		lkey := c.ep.SendMR.LKey()
		c.ssge[0] = verbs.SGE{Addr: verbs.AddrOf(c.sbuf[d.Off:]), Length: uint32(first), LKey: lkey}
		sg := c.ssge[:1]
		if first < len(p) {
			c.ssge[1] = verbs.SGE{Addr: verbs.AddrOf(c.sbuf), Length: uint32(len(p) - first), LKey: lkey}
			sg = c.ssge[:2]
		}
		if c.Core.Err == nil && c.postLocked(verbs.OpRDMAWriteWithImm, d.Imm, sg, d.Addr, d.Key) == nil {
			sent += int(d.N)
			c.Core.Counters.MsgsSent++
			c.Core.TalkedLocked()
			c.Core.Counters.WroteLocked(int(d.N), sent == int(d.N))
		}
		c.Core.Mu.Unlock()
	}
}

// writeErrLocked says why a Write cannot go on, or nil.
func (c *Conn) writeErrLocked() error {
	if err := c.Core.StopErrLocked(&c.Core.WriteDL); err != nil {
		return err
	}
	switch {
	case c.wrShut || c.discSent:
		return core.ErrWriteClosed
	case c.peerGone:
		return core.ErrReset
	}
	return c.Core.Err
}

// CloseWrite shuts down the sending side, as rsockets' shutdown(SHUT_WR)
// and (*net.TCPConn).CloseWrite do: the peer reads what was written, then
// EOF; reading goes on.
func (c *Conn) CloseWrite() error { return c.poller().CloseWrite(c) }

// WriteShutLocked: a peer that is gone takes writes no more either.
func (c *Conn) WriteShutLocked() bool {
	if c.wrShut || c.discSent || c.peerGone {
		c.wrShut = true
		return true
	}
	return false
}

// ShutWriteLocked sends SHUTDOWN (or DISCONNECT once reading is shut
// too) if a control message may go now.
func (c *Conn) ShutWriteLocked() (bool, error) {
	if !c.canCtrlLocked() {
		return false, nil
	}
	// As rsocket.c: once both directions are shut, a disconnect.
	code := uint32(rsocket.CtrlShutdown)
	if c.rdShut {
		code = rsocket.CtrlDisconnect
		c.discSent = true
	}
	c.wrShut = true
	return true, c.postCtrlLocked(code)
}

// Flush has nothing to do: ShutWriteLocked posted.
func (c *Conn) Flush() error { return nil }

// DrainTime bounds Close's drain: Config.HandshakeTimeout.
func (c *Conn) DrainTime() time.Duration { return c.p.HandshakeTimeout }

// Close closes the connection: the bytes written are delivered (within
// Config.HandshakeTimeout), the peer is told DISCONNECT and reads EOF.
// Pending Reads and Writes return net.ErrClosed.
func (c *Conn) Close() error { return c.poller().Close(c) }

// Drain sends DISCONNECT (rsocket.c's rclose: shutdown(SHUT_RDWR)) and
// waits until every posted send has completed.
func (c *Conn) Drain(dl *core.Deadline) {
	for {
		c.Core.Mu.Lock()
		if c.Core.Err != nil || c.peerGone || c.Core.Torn {
			c.Core.Mu.Unlock()
			return
		}
		if !c.discSent && c.canCtrlLocked() {
			c.discSent = true
			c.postCtrlLocked(rsocket.CtrlDisconnect)
		}
		done := c.discSent && c.tx.AllDone()
		c.Core.Mu.Unlock()
		if done || dl.Passed() {
			return
		}
		c.await(c.Core.SndReady, dl, true)
	}
}

// FailLocked records why the connection failed (the first reason wins) and
// wakes every waiter.
func (c *Conn) FailLocked(err error) {
	if c.Core.Err == nil {
		c.Core.Err = err
	}
	c.poller().WakeLocked()
}

func (c *Conn) poller() core.Poller {
	return core.Poller{F: &c.Core, E: &c.ep, W: c}
}

// await makes completions arrive for a caller that cannot go on (the poll
// role, internal/core's Poller).
func (c *Conn) await(ready chan struct{}, dl *core.Deadline, draining bool) {
	c.poller().Await(ready, dl, draining)
}

// Handle applies a batch of completions.
func (c *Conn) Handle(wcs []verbs.WC) {
	var perr error
	reposts := 0
	c.Core.Mu.Lock()
	// After Close or the peer's disconnect, flushed work requests are
	// expected: they are not the connection's failure.
	quiet := func() bool { return c.Core.Closed || c.peerGone || c.discSent }
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status == verbs.WCWRFlushErr && !quiet() && c.Core.Err == nil {
			// Flushed with nothing failed before: the QP went to error
			// because the peer disconnected (a dead peer's kernel sends the
			// DREQ), and the CM's event may come after the flush. rsocket.c
			// ends the stream at a disconnect: so does this, whichever of
			// the two is seen first.
			c.rdShut, c.peerGone = true, true
		}
		if wc.WRID&rsRecvWRID != 0 {
			if wc.Status != verbs.WCSuccess {
				if !quiet() {
					c.FailLocked(core.WCError(wc.Status))
				}
				continue
			}
			reposts++
			if perr == nil && c.Core.Err == nil {
				perr = c.recvLocked(wc)
			}
			continue
		}
		if err := c.tx.Completed(wc.WRID); err != nil && perr == nil {
			perr = core.ProtoError(err.Error())
		}
		if wc.Status != verbs.WCSuccess && !quiet() {
			c.FailLocked(core.WCError(wc.Status))
		}
	}
	if perr != nil {
		c.FailLocked(perr)
	}
	if reposts > 0 && c.Core.Err == nil && !c.Core.Torn {
		if err := c.ep.QP.PostRecv(c.rwrs[:reposts]); err != nil {
			c.FailLocked(err)
		}
	}
	c.creditLocked()
	c.Core.Mu.Unlock()
	core.Poke(c.Core.RcvReady)
	core.Poke(c.Core.SndReady)
	if perr != nil {
		_ = c.ep.ID.Disconnect() // the peer broke the protocol: it gets a disconnect
	}
}

// recvLocked applies one message from the peer; every value in it is
// checked, and one that breaks the protocol fails the connection.
func (c *Conn) recvLocked(wc *verbs.WC) error {
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
		return core.ProtoError("rsocket message without immediate data")
	}
	kind, err := rsocket.Receive(&c.rx, &c.tx, c.sgl, wc.Imm, wc.ByteLen, c.rdShut)
	if err != nil {
		return core.ProtoError(err.Error())
	}
	switch kind {
	case rsocket.KindData:
		c.Core.Counters.MsgsRecv++
		c.Core.HeardLocked()
	case rsocket.KindDisconnect:
		c.rdShut, c.peerGone = true, true
	case rsocket.KindShutdown:
		c.rdShut = true
	}
	return nil
}

// onEvent handles a connection manager event of the established
// connection (the watch, internal/cmwatch).
func (c *Conn) onEvent(ev verbs.CMEvent) {
	if !cmwatch.ActsOn(ev.Type) {
		return
	}
	// rsocket.c takes a disconnect as the end of the stream. What
	// landed before it is applied first, so that Read returns it before
	// io.EOF (settle takes the poll role from a holder that has not
	// polled it yet).
	c.poller().Settle(func() { c.rdShut, c.peerGone = true, true })
}

// tick is a wake-up of the watch: on an idle connection, a keepalive (a
// zero-length RDMA WRITE, as rsocket.c's).
func (c *Conn) tick(now time.Time) time.Time {
	c.poller().TryPoll() // an idle connection's completions wait in the CQ
	c.Core.Mu.Lock()
	if !c.Core.Closed && c.canCtrlLocked() && c.tx.AllDone() {
		c.tx.TakeCtrl()
		c.postLocked(verbs.OpRDMAWrite, rsocket.Msg(rsocket.OpCtrl, rsocket.CtrlKeepalive), nil, c.peer.TargetSGL.Addr, c.peer.TargetSGL.Key)
	}
	c.Core.Mu.Unlock()
	return now.Add(c.p.KeepAlive)
}

// ReleaseVerbs destroys what Init created, in the order the
// verbs require.
func (c *Conn) ReleaseVerbs() {
	c.Core.Mu.Lock()
	c.Core.Torn = true
	// A poll in flight (the watch's) must finish before the CQ goes;
	// none starts afterwards. Posts are made under mu.
	for c.Core.Poll.Held {
		c.Core.Mu.Unlock()
		runtime.Gosched()
		c.Core.Mu.Lock()
	}
	c.Core.Mu.Unlock()
	c.ep.ReleaseQueues(c.Core.Poll.Unacked)
	c.Core.Poll.Unacked = 0
	c.ep.ReleaseMemory()
}

// Stats returns what the connection has done so far. The rsocket wire has
// no ring growth or heartbeats: those fields stay zero. Its Reads poll as
// Conn's do and are counted the same way (at once, handed over, spun,
// slept). A message is one data write on the wire
// (rsocket.c's: at most a granted region's rest, the send buffer's
// contiguous room and RS_MAX_TRANSFER), and CreditWaits counts Writes
// that waited for a credit, a region, send buffer room or a queue slot.
func (c *Conn) Stats() connstats.Snapshot {
	return c.Snapshot("rsocket", &c.ep, func(s *connstats.Snapshot, _ *connstats.Counters) error {
		s.RingSize, s.SendBufferSize = len(c.rbuf), len(c.sbuf)
		_, buffered := c.rx.Buffered()
		s.Buffered = int(buffered)
		return c.Core.Err
	})
}

// watcher is a Conn as its watch sees it (cmwatch.Watcher), with the
// watch's steps under the names the watch calls.
type watcher Conn

func (w *watcher) OnEvent(ev verbs.CMEvent)     { (*Conn)(w).onEvent(ev) }
func (w *watcher) Tick(now time.Time) time.Time { return (*Conn)(w).tick(now) }

// QP is the connection's queue pair (what soft.Carrier asks about).
func (c *Conn) QP() verbs.QP { return c.ep.QP }

// PeerGoneLocked reports whether the peer disconnected (under Core.Mu).
func (c *Conn) PeerGoneLocked() bool { return c.peerGone }
