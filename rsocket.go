package rdma

import (
	"io"
	"runtime"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/rsocket"
	"github.com/rdmanet/rdma/verbs"
)

// RsocketConn is a net.Conn that speaks rdma-core's rsockets protocol
// (Config.Wire = "rsocket"), so that its peer may be a C program using
// rsockets: rstream, or any TCP program run with
// LD_PRELOAD=librspreload.so. It behaves as Conn does: deadlines,
// net.ErrClosed after Close, *net.OpError with Net "rdma", CloseWrite as
// rsockets' shutdown(SHUT_WR), io.EOF after the peer's shutdown or close.
// Reads are serialised among themselves, Writes too; a Read and a Write run
// in parallel.
type RsocketConn struct {
	// The net.Conn face (connface.go); its core.Mu guards the fields below
	// it marks so, and posting.
	connFace
	p rsParams

	// The verbs resources (endpoint.go): ringMR holds the target SGL and
	// the rbuf, sendMR the send buffer (sbuf) and the control staging;
	// inline is the largest send sent inline.
	endpoint

	sgl  []byte // target SGL: the peer grants regions of its rbuf here
	rbuf []byte
	sbuf []byte // the send buffer
	ctrl []byte // one SGE per control slot, for region grants
	peer rsocket.ConnData

	// Guarded by mu (connFace):
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

// newRsocketConn sets up the verbs resources on id (device known) and posts
// the receives, as rsocket.c's rs_create_ep does.
func newRsocketConn(provider string, ech verbs.EventChannel, id verbs.CMID, p rsParams) (_ *RsocketConn, err error) {
	c := &RsocketConn{
		p:        p,
		endpoint: endpoint{ep: core.Endpoint{Events: ech, ID: id}},
	}
	c.init(provider, c.poller())
	defer func() {
		if err != nil {
			c.releaseVerbs()
		}
	}()
	ctx, attr, err := core.DeviceOf(id)
	if err != nil {
		return nil, err
	}
	sq, rq := core.FitQueues(attr, p.sqSize, p.rqSize, 0)
	if sq < rsocket.MinQueue || rq < rsocket.MinQueue {
		return nil, verbs.Errorf("ibv_create_qp", 0, "device queues too small for rsocket (max WR %d, max CQE %d)", attr.MaxQPWR, attr.MaxCQE)
	}
	inline := min(p.inline, attr.MaxInlineData)
	sglLen := rsocket.SGLSize * rsocket.SGELen
	ctrlLen := rsocket.CtrlSlots * rsocket.SGELen
	all, err := c.ep.Allocate(sglLen + p.rbufSize + p.sbufSize + ctrlLen)
	if err != nil {
		return nil, err
	}
	recv := all[: sglLen+p.rbufSize : sglLen+p.rbufSize]
	c.sgl = recv[:sglLen:sglLen]
	c.rbuf = recv[sglLen:]
	send := all[len(recv) : len(recv)+p.sbufSize+ctrlLen]
	c.sbuf = send[:p.sbufSize:p.sbufSize]
	c.ctrl = send[p.sbufSize:]
	if err = c.ep.Register(ctx, recv, send); err != nil {
		return nil, err
	}
	qc := verbs.QPCap{MaxSendWR: sq, MaxRecvWR: rq, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: inline}
	if err = c.ep.CreateQP(ctx, &qc); err != nil {
		return nil, err
	}
	c.inline = min(inline, qc.MaxInlineData)
	c.p.sqSize, c.p.rqSize = sq, rq
	c.rwrs = make([]verbs.RecvWR, rq)
	for i := range c.rwrs {
		c.rwrs[i].WRID = rsRecvWRID
	}
	if err = c.ep.QP.PostRecv(c.rwrs); err != nil {
		return nil, err
	}
	return c, nil
}

// connData is this side's half of the handshake: no iomap, and the target
// SGL read as little-endian (so no FlagNet, whatever the host).
func (c *RsocketConn) connData() []byte {
	cd := rsocket.ConnData{
		Version:   rsocket.Version,
		Credits:   uint16(c.p.rqSize),
		TargetSGL: rsocket.SGE{Addr: c.ep.RingMR.Addr(), Key: c.ep.RingMR.RKey(), Length: rsocket.SGLSize},
		DataBuf:   rsocket.FirstRegion(len(c.rbuf), c.ep.RingMR.Addr()+uint64(len(c.sgl)), c.ep.RingMR.RKey()),
	}
	b := make([]byte, rsocket.ConnDataLen)
	cd.Marshal(b)
	return b
}

// setPeer takes in the peer's connection data.
func (c *RsocketConn) setPeer(peer rsocket.ConnData) {
	c.peer = peer
	c.tx.Init(peer, c.p.sqSize, len(c.sbuf))
	c.rx.Init(len(c.rbuf), c.ep.RingMR.Addr()+uint64(len(c.sgl)), c.ep.RingMR.RKey(), uint16(c.p.rqSize), peer)
}

// takeAnswer takes in the listener's connection data.
func (c *RsocketConn) takeAnswer(private []byte) error {
	peer, err := rsocket.ParseConnData(private)
	if err != nil {
		return err
	}
	c.setPeer(peer)
	return nil
}

// start runs the connection once it is established.
func (c *RsocketConn) start() {
	c.established(c.ep.ID.LocalAddr(), c.ep.ID.RemoteAddr())
	c.core.Mu.Lock()
	c.creditLocked() // the second half of the rbuf, at once, as rsocket.c does
	c.core.Mu.Unlock()
	c.core.Poll.Configure(c.p.poll.pollTime(), c.p.poll.busyPoll(), c.provider == ProviderSoft)
	var next time.Time
	if c.p.keepAlive > 0 {
		next = time.Now().Add(c.p.keepAlive)
	}
	c.core.Watch = cmwatch.Start(c.ep.Events, (*rsocketWatcher)(c), next)
	register(c) // registry.go
}

// postLocked posts one signaled send (rsocket.c signals every send); its WR
// id is the message's immediate, which is how its completion is accounted.
func (c *RsocketConn) postLocked(op verbs.Opcode, msg uint32, sg []verbs.SGE, addr uint64, rkey uint32) error {
	if c.core.Torn {
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
		c.failLocked(err)
		return err
	}
	return nil
}

// canCtrlLocked reports whether a credit or control message may go now.
func (c *RsocketConn) canCtrlLocked() bool {
	return c.core.Err == nil && !c.core.Torn && !c.peerGone && !c.discSent && c.tx.CtrlAvail()
}

// postCtrlLocked sends a control message (a zero-length write with
// immediate); the caller checked canCtrlLocked.
func (c *RsocketConn) postCtrlLocked(code uint32) error {
	c.tx.TakeCtrl()
	return c.postLocked(verbs.OpRDMAWriteWithImm, rsocket.Msg(rsocket.OpCtrl, code), nil, c.peer.TargetSGL.Addr, c.peer.TargetSGL.Key)
}

// creditLocked returns credit, and grants free halves of the rbuf, when
// due.
func (c *RsocketConn) creditLocked() {
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
// packets carry, as its queue pair reports it (see Conn.TrafficClass and
// Config.TrafficClass, which both ends of the rsocket wire take too).
func (c *RsocketConn) TrafficClass() (int, error) { return c.trafficClass(&c.endpoint) }

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has shut down its sending side (or closed, or
// disconnected) and everything before that was read.
func (c *RsocketConn) Read(b []byte) (int, error) {
	c.core.ReadMu.Lock()
	defer c.core.ReadMu.Unlock()
	for {
		c.core.Mu.Lock()
		if err := c.core.ReadStopLocked(); err != nil {
			c.core.Mu.Unlock()
			return 0, err
		}
		off, avail := c.rx.Buffered()
		if avail > 0 {
			if len(b) == 0 {
				c.core.Mu.Unlock()
				return 0, nil
			}
			n := int(min(avail, uint64(len(b))))
			c.core.Mu.Unlock()
			// The bytes are ours until consumed and credited back.
			first := min(n, len(c.rbuf)-int(off))
			copy(b, c.rbuf[off:int(off)+first])
			copy(b[first:n], c.rbuf)
			c.core.Mu.Lock()
			c.rx.Consume(uint64(n))
			c.core.Counters.ReadLocked(n) // stats.go
			c.creditLocked()
			c.core.Mu.Unlock()
			return n, nil
		}
		if c.rdShut {
			c.core.Mu.Unlock()
			return 0, io.EOF
		}
		if err := c.core.Err; err != nil {
			c.core.Mu.Unlock()
			return 0, c.opErr("read", err)
		}
		c.core.Mu.Unlock()
		if len(b) == 0 {
			return 0, nil
		}
		c.await(c.core.RcvReady, &c.core.ReadDL, false)
	}
}

// Write writes b. It returns once all of b is posted (copied into
// registered memory), or with an error and the count posted before it.
func (c *RsocketConn) Write(b []byte) (int, error) {
	c.core.WriteMu.Lock()
	defer c.core.WriteMu.Unlock()
	for sent := 0; ; {
		if sent == len(b) && sent > 0 {
			return sent, nil
		}
		c.core.Mu.Lock()
		if over, err := c.core.WriteOverLocked(c.writeErrLocked(), sent, len(b)); over {
			c.core.Mu.Unlock()
			return sent, err
		}
		d, ok := c.tx.NextData(len(b) - sent)
		if !ok {
			c.core.Counters.CreditWaits++
			c.core.Mu.Unlock()
			c.poller().AwaitRoom()
			continue
		}
		c.core.Mu.Unlock()
		// The reserved send buffer bytes are this writer's alone.
		p := b[sent : sent+int(d.N)]
		first := min(len(p), len(c.sbuf)-int(d.Off))
		copy(c.sbuf[d.Off:], p[:first])
		copy(c.sbuf, p[first:])
		c.core.Mu.Lock()
		lkey := c.ep.SendMR.LKey()
		c.ssge[0] = verbs.SGE{Addr: verbs.AddrOf(c.sbuf[d.Off:]), Length: uint32(first), LKey: lkey}
		sg := c.ssge[:1]
		if first < len(p) {
			c.ssge[1] = verbs.SGE{Addr: verbs.AddrOf(c.sbuf), Length: uint32(len(p) - first), LKey: lkey}
			sg = c.ssge[:2]
		}
		if c.core.Err == nil && c.postLocked(verbs.OpRDMAWriteWithImm, d.Imm, sg, d.Addr, d.Key) == nil {
			sent += int(d.N)
			c.core.Counters.MsgsSent++
			c.core.TalkedLocked()
			c.core.Counters.WroteLocked(int(d.N), sent == int(d.N))
		}
		c.core.Mu.Unlock()
	}
}

// writeErrLocked says why a Write cannot go on, or nil.
func (c *RsocketConn) writeErrLocked() error {
	if err := c.core.StopErrLocked(&c.core.WriteDL); err != nil {
		return err
	}
	switch {
	case c.wrShut || c.discSent:
		return core.ErrWriteClosed
	case c.peerGone:
		return core.ErrReset
	}
	return c.core.Err
}

// CloseWrite shuts down the sending side, as rsockets' shutdown(SHUT_WR)
// and (*net.TCPConn).CloseWrite do: the peer reads what was written, then
// EOF; reading goes on.
func (c *RsocketConn) CloseWrite() error { return c.poller().CloseWrite((*rsocketCore)(c)) }

// writeShutLocked: a peer that is gone takes writes no more either.
func (c *RsocketConn) writeShutLocked() bool {
	if c.wrShut || c.discSent || c.peerGone {
		c.wrShut = true
		return true
	}
	return false
}

func (c *RsocketConn) shutWriteLocked() (bool, error) {
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

func (c *RsocketConn) flush() error { return nil } // postCtrlLocked posted

func (c *RsocketConn) drainTime() time.Duration { return c.p.handshakeTimeout }

// Close closes the connection: the bytes written are delivered (within
// Config.HandshakeTimeout), the peer is told DISCONNECT and reads EOF.
// Pending Reads and Writes return net.ErrClosed.
func (c *RsocketConn) Close() error { return closeConn(c, c.poller(), (*rsocketCore)(c)) }

// drain sends DISCONNECT (rsocket.c's rclose: shutdown(SHUT_RDWR)) and
// waits until every posted send has completed.
func (c *RsocketConn) drain(dl *core.Deadline) {
	for {
		c.core.Mu.Lock()
		if c.core.Err != nil || c.peerGone || c.core.Torn {
			c.core.Mu.Unlock()
			return
		}
		if !c.discSent && c.canCtrlLocked() {
			c.discSent = true
			c.postCtrlLocked(rsocket.CtrlDisconnect)
		}
		done := c.discSent && c.tx.AllDone()
		c.core.Mu.Unlock()
		if done || dl.Passed() {
			return
		}
		c.await(c.core.SndReady, dl, true)
	}
}

// failLocked records why the connection failed (the first reason wins) and
// wakes every waiter.
func (c *RsocketConn) failLocked(err error) {
	if c.core.Err == nil {
		c.core.Err = err
	}
	c.poller().WakeLocked()
}

func (c *RsocketConn) poller() core.Poller {
	return core.Poller{F: &c.core, E: &c.ep, W: (*rsocketCore)(c)}
}

// await makes completions arrive for a caller that cannot go on (the poll
// role, internal/core's Poller).
func (c *RsocketConn) await(ready chan struct{}, dl *core.Deadline, draining bool) {
	c.poller().Await(ready, dl, draining)
}

// handle applies a batch of completions.
func (c *RsocketConn) handle(wcs []verbs.WC) {
	var perr error
	reposts := 0
	c.core.Mu.Lock()
	// After Close or the peer's disconnect, flushed work requests are
	// expected: they are not the connection's failure.
	quiet := func() bool { return c.core.Closed || c.peerGone || c.discSent }
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status == verbs.WCWRFlushErr && !quiet() && c.core.Err == nil {
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
					c.failLocked(core.WCError(wc.Status))
				}
				continue
			}
			reposts++
			if perr == nil && c.core.Err == nil {
				perr = c.recvLocked(wc)
			}
			continue
		}
		if err := c.tx.Completed(wc.WRID); err != nil && perr == nil {
			perr = core.ProtoError(err.Error())
		}
		if wc.Status != verbs.WCSuccess && !quiet() {
			c.failLocked(core.WCError(wc.Status))
		}
	}
	if perr != nil {
		c.failLocked(perr)
	}
	if reposts > 0 && c.core.Err == nil && !c.core.Torn {
		if err := c.ep.QP.PostRecv(c.rwrs[:reposts]); err != nil {
			c.failLocked(err)
		}
	}
	c.creditLocked()
	c.core.Mu.Unlock()
	core.Poke(c.core.RcvReady)
	core.Poke(c.core.SndReady)
	if perr != nil {
		_ = c.ep.ID.Disconnect() // the peer broke the protocol: it gets a disconnect
	}
}

// recvLocked applies one message from the peer; every value in it is
// checked, and one that breaks the protocol fails the connection.
func (c *RsocketConn) recvLocked(wc *verbs.WC) error {
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
		return core.ProtoError("rsocket message without immediate data")
	}
	kind, err := rsocket.Receive(&c.rx, &c.tx, c.sgl, wc.Imm, wc.ByteLen, c.rdShut)
	if err != nil {
		return core.ProtoError(err.Error())
	}
	switch kind {
	case rsocket.KindData:
		c.core.Counters.MsgsRecv++
		c.core.HeardLocked()
	case rsocket.KindDisconnect:
		c.rdShut, c.peerGone = true, true
	case rsocket.KindShutdown:
		c.rdShut = true
	}
	return nil
}

// onEvent handles a connection manager event of the established
// connection (the watch, internal/cmwatch).
func (c *RsocketConn) onEvent(ev verbs.CMEvent) {
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
func (c *RsocketConn) tick(now time.Time) time.Time {
	c.poller().TryPoll() // an idle connection's completions wait in the CQ
	c.core.Mu.Lock()
	if !c.core.Closed && c.canCtrlLocked() && c.tx.AllDone() {
		c.tx.TakeCtrl()
		c.postLocked(verbs.OpRDMAWrite, rsocket.Msg(rsocket.OpCtrl, rsocket.CtrlKeepalive), nil, c.peer.TargetSGL.Addr, c.peer.TargetSGL.Key)
	}
	c.core.Mu.Unlock()
	return now.Add(c.p.keepAlive)
}

// releaseVerbs destroys what newRsocketConn created, in the order the
// verbs require.
func (c *RsocketConn) releaseVerbs() {
	c.core.Mu.Lock()
	c.core.Torn = true
	// A poll in flight (the watch's) must finish before the CQ goes;
	// none starts afterwards. Posts are made under mu.
	for c.core.Poll.Held {
		c.core.Mu.Unlock()
		runtime.Gosched()
		c.core.Mu.Lock()
	}
	c.core.Mu.Unlock()
	c.release(c.core.Poll.Unacked)
	c.core.Poll.Unacked = 0
}

// Stats returns what the connection has done so far. The rsocket wire has
// no ring growth or heartbeats: those fields stay zero. Its Reads poll as
// Conn's do and are counted the same way (at once, handed over, spun,
// slept). A message is one data write on the wire
// (rsocket.c's: at most a granted region's rest, the send buffer's
// contiguous room and RS_MAX_TRANSFER), and CreditWaits counts Writes
// that waited for a credit, a region, send buffer room or a queue slot.
func (c *RsocketConn) Stats() ConnStats {
	return c.snapshot(WireRsocket, &c.endpoint, func(s *ConnStats, _ *connstats.Counters) error {
		s.RingSize, s.SendBufferSize = len(c.rbuf), len(c.sbuf)
		_, buffered := c.rx.Buffered()
		s.Buffered = int(buffered)
		return c.core.Err
	})
}

// peerTakesRDMACM is false: rsocket's connection data has no such flag.
func (c *RsocketConn) peerTakesRDMACM() bool { return false }

// rsocketWatcher is an RsocketConn as its watch sees it (cmwatch.Watcher),
// without methods of the public type's own.
type rsocketWatcher RsocketConn

func (w *rsocketWatcher) OnEvent(ev verbs.CMEvent)     { (*RsocketConn)(w).onEvent(ev) }
func (w *rsocketWatcher) Tick(now time.Time) time.Time { return (*RsocketConn)(w).tick(now) }
