package rdma

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Conn is a net.Conn carried by an RDMA reliable connection. It is safe for
// concurrent use: Reads are serialised among themselves, Writes too, and a
// Read and a Write run in parallel.
type Conn struct {
	provider     string
	fallback     error // why an auto dial fell back to soft (mixed.go)
	laddr, raddr *Addr
	cfg          Config

	// verbs objects, owned by the Conn and released by Close.
	ech    verbs.EventChannel
	id     verbs.CMID
	pd     verbs.PD
	cch    verbs.CompChannel
	cq     verbs.CQ
	qp     verbs.QP
	mem    *verbs.Memory
	ringMR verbs.MR
	sendMR verbs.MR

	ring     []byte // our receive ring, written by the peer
	ringLog  uint8
	sbuf     []byte // send staging ring (registered, local access)
	sbufMask uint64
	ibuf     []byte // staging for inline sends
	inline   int    // largest write sent inline
	sqDepth  uint64 // send WRs data and credits may occupy (one more is kept for markers)
	rqDepth  int    // receive WRs kept posted
	sigEvery uint64 // at most this many unsignaled sends in a row
	chunk    int    // largest single RDMA write

	rmu sync.Mutex // serialises Read
	wmu sync.Mutex // serialises Write, CloseWrite and Close's drain

	mu sync.Mutex // guards everything below
	// The stream's windows: what the peer may write into our ring, and
	// what we may write into its.
	rx         stream.Recv
	tx         stream.Send
	recvPosted int // receive WRs outstanding on the QP
	// send side
	sbTail     uint64   // send buffer bytes reserved
	sbPosted   uint64   // send buffer bytes posted
	sbHead     uint64   // send buffer bytes whose WRs completed
	sqPosted   uint64   // send WRs posted (the next WR's id)
	sqDone     uint64   // send WRs completed
	sqReserved uint64   // send WRs reserved by the writer, not yet posted
	unsignaled uint64   // unsignaled sends since the last signaled one
	sqEnds     []uint64 // per queue slot: send buffer bytes posted up to that WR
	creditWant bool     // a credit update is due but could not be queued

	// The send queue as posted: WRs are built under mu into slots indexed by
	// their id, then handed to the QP in order by submit.
	sq          []verbs.SendWR
	sqSGE       []verbs.SGE
	sqSubmitted uint64 // WRs handed to the QP
	submitting  bool   // a goroutine is in submit
	finSent     bool
	err         error // why the connection failed; nil while healthy
	closed      bool
	torn        bool // verbs objects destroyed

	// The poll role (completions.go): one caller at a time polls the CQ
	// and sleeps on the completion channel; others wait on rcvReady or
	// sndReady, counted in waiters.
	polling bool
	waiters int

	rwrs []verbs.RecvWR

	rcvReady chan struct{} // poked when the receive side changed
	sndReady chan struct{} // poked when send resources were freed
	closedCh chan struct{} // closed by Close
	rdl, wdl deadline

	poll    pollState     // the poll role holder's own state
	intrSeq atomic.Uint64 // moved by interrupt
	cmDone  chan struct{}
}

const recvWRID = 1 << 63 // set in the WR id of every receive

var errStraySend = &connError{"completion for a send that is not outstanding", syscall.EIO}

// maxChunk bounds one RDMA write, so that the reader starts on a long Write
// before all of it has landed.
const maxChunk = 64 << 10

// newConn sets up a connection's verbs resources on id (whose device is
// known: route resolved, or a connect request) and posts its receives.
func newConn(provider string, ech verbs.EventChannel, id verbs.CMID, cfg Config) (_ *Conn, err error) {
	c := &Conn{
		provider: provider,
		cfg:      cfg,
		ech:      ech,
		id:       id,
		rcvReady: make(chan struct{}, 1),
		sndReady: make(chan struct{}, 1),
		closedCh: make(chan struct{}),
		rdl:      makeDeadline(),
		wdl:      makeDeadline(),
		cmDone:   make(chan struct{}),
	}
	defer func() {
		if err != nil {
			c.releaseVerbs() // c, not the nil result
		}
	}()
	ctx := id.Context()
	if ctx == nil {
		return nil, verbs.Errorf("rdma_create_qp", 0, "connection manager ID has no device")
	}
	attr, err := ctx.Query()
	if err != nil {
		return nil, err
	}
	sq, rq := cfg.SendDepth, cfg.RecvDepth
	if attr.MaxQPWR > 0 {
		sq, rq = min(sq, attr.MaxQPWR-1), min(rq, attr.MaxQPWR)
	}
	if attr.MaxCQE > 0 && sq+1+rq > attr.MaxCQE {
		sq, rq = min(sq, attr.MaxCQE/2-1), min(rq, attr.MaxCQE/2)
	}
	if sq < 4 || rq < minDepth {
		return nil, verbs.Errorf("ibv_create_qp", 0, "device queues too small (max WR %d, max CQE %d)", attr.MaxQPWR, attr.MaxCQE)
	}
	inline := cfg.InlineThreshold
	if inline > attr.MaxInlineData {
		inline = attr.MaxInlineData
	}

	ringSize, sbufSize := cfg.RingSize, cfg.SendBufferSize
	slots := sq + 2 // every WR that can be outstanding (sq, plus one probe), and one spare
	ibufSize := max(slots*inline, 64)
	if c.mem, err = verbs.AllocMemory(ringSize + sbufSize + ibufSize); err != nil {
		return nil, err
	}
	all := c.mem.Bytes()
	c.ring = all[:ringSize:ringSize]
	c.sbuf = all[ringSize : ringSize+sbufSize : ringSize+sbufSize]
	c.ibuf = all[ringSize+sbufSize : ringSize+sbufSize+ibufSize]
	c.ringLog = stream.RingLog(ringSize)
	c.sbufMask = uint64(sbufSize - 1)

	if c.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if c.ringMR, err = c.pd.RegMR(c.ring, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if c.sendMR, err = c.pd.RegMR(all[ringSize:], verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.cch, err = ctx.CreateCompChannel(); err != nil {
		return nil, err
	}
	if c.cq, err = ctx.CreateCQ(sq+1+rq, c.cch); err != nil {
		return nil, err
	}
	qa := &verbs.QPInitAttr{
		SendCQ: c.cq,
		RecvCQ: c.cq,
		Cap: verbs.QPCap{
			MaxSendWR:     sq + 1,
			MaxRecvWR:     rq,
			MaxSendSGE:    1,
			MaxRecvSGE:    1,
			MaxInlineData: inline,
		},
	}
	if c.qp, err = id.CreateQP(c.pd, qa); err != nil {
		return nil, err
	}
	if qa.Cap.MaxInlineData < inline {
		inline = qa.Cap.MaxInlineData
	}
	c.inline = inline
	c.sqDepth = uint64(sq)
	c.rqDepth = rq
	c.sigEvery = max(c.sqDepth/4, 1)
	c.chunk = min(maxChunk, ringSize/4, sbufSize/4)
	c.sq = make([]verbs.SendWR, slots)
	c.sqSGE = make([]verbs.SGE, slots)
	c.sqEnds = make([]uint64, slots)
	c.rwrs = make([]verbs.RecvWR, rq)
	for i := range c.rwrs {
		c.rwrs[i].WRID = recvWRID
	}
	if err = c.qp.PostRecv(c.rwrs); err != nil {
		return nil, err
	}
	c.recvPosted = rq
	c.rx = stream.NewRecv(c.ringLog, rq)
	return c, nil
}

// hello is this side's half of the handshake.
func (c *Conn) hello() stream.Hello {
	return stream.Hello{
		Version:   stream.Version,
		RecvDepth: uint16(c.rqDepth),
		RingAddr:  c.ringMR.Addr(),
		RingKey:   c.ringMR.RKey(),
		RingLog:   c.ringLog,
	}
}

// setPeer takes in the peer's hello.
func (c *Conn) setPeer(h stream.Hello) {
	c.tx = stream.NewSend(h)
	c.chunk = min(c.chunk, int(c.tx.Size/4))
}

// start runs the connection once it is established.
func (c *Conn) start() {
	c.laddr = fromTCPAddr(c.id.LocalAddr())
	c.raddr = fromTCPAddr(c.id.RemoteAddr())
	c.tuneQP()
	c.poll.spin = c.cfg.pollTime(c.provider)
	go c.cmLoop()
}

// tuneQP sets the transport timeout so that a peer that stops answering is
// declared dead within a few seconds (4.096 us * 2^16 = 268 ms per try, 8
// tries). Devices that fix the timeout at RTR->RTS refuse the change; the
// connection manager's value then stands.
func (c *Conn) tuneQP() {
	_ = c.qp.Modify(&verbs.QPAttr{Timeout: 16, RetryCnt: 7}, verbs.QPAttrTimeout|verbs.QPAttrRetryCnt)
}

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has closed its sending side and everything before
// that was read.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, c.opErr("read", net.ErrClosed)
		}
		if c.rdl.passed() {
			c.mu.Unlock()
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if avail := c.rx.Buffered(); avail > 0 {
			if len(b) == 0 {
				c.mu.Unlock()
				return 0, nil
			}
			off := c.rx.Head & c.rx.Mask
			n := int(min(avail, uint64(len(b))))
			c.mu.Unlock()
			// The bytes are ours until we credit them back: no lock needed.
			first := min(n, len(c.ring)-int(off))
			copy(b, c.ring[off:int(off)+first])
			copy(b[first:n], c.ring)
			c.mu.Lock()
			c.rx.Consume(n)
			c.creditLocked(false)
			c.unlockSubmit()
			return n, nil
		}
		if c.rx.FinRcvd {
			c.mu.Unlock()
			return 0, io.EOF
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, c.opErr("read", err)
		}
		if len(b) == 0 {
			c.mu.Unlock()
			return 0, nil
		}
		c.mu.Unlock()
		c.await(c.rcvReady, &c.rdl, false)
	}
}

// Write writes b to the connection. It returns once all of b is posted to the
// send queue (copied into registered memory, so b may be reused), or with an
// error; a short count comes with the error.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	sent := 0
	for {
		if sent == len(b) && sent > 0 {
			return sent, nil // all queued: what happens to the conn now is not this Write's
		}
		c.mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.mu.Unlock()
			return sent, c.opErr("write", err)
		}
		if sent == len(b) {
			c.mu.Unlock()
			return sent, nil
		}
		n, at, inline := c.reserveLocked(len(b) - sent)
		if n == 0 {
			c.mu.Unlock()
			c.await(c.sndReady, &c.wdl, false)
			continue
		}
		p := b[sent : sent+n]
		if inline {
			// Each queue slot has its own inline staging, so the bytes
			// stay put until whoever posts the queue gets to them.
			slot := int(c.sqPosted % uint64(len(c.sq)))
			buf := c.ibuf[slot*c.inline : slot*c.inline+n]
			copy(buf, p)
			c.enqueueDataLocked(buf, at, verbs.SendInline)
			c.mu.Unlock()
		} else {
			off := c.sbTail & c.sbufMask
			c.sbTail += uint64(n)
			c.sqReserved++
			c.mu.Unlock()
			// The reserved bytes are the writer's alone until queued.
			buf := c.sbuf[off : off+uint64(n)]
			copy(buf, p)
			c.mu.Lock()
			c.sqReserved--
			// Reserved ring space must be filled, or the stream would
			// desynchronise: only a failed connection stops it now.
			if err := c.err; err != nil {
				c.mu.Unlock()
				return sent, c.opErr("write", err)
			}
			c.enqueueDataLocked(buf, at, 0)
			c.mu.Unlock()
		}
		c.submit()
		sent += n
	}
}

// writeErrLocked says why a Write cannot go on, or nil.
func (c *Conn) writeErrLocked() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.wdl.passed():
		return os.ErrDeadlineExceeded
	case c.finSent:
		return errWriteClosed
	case c.err != nil:
		return c.err
	}
	return nil
}

// reserveLocked claims room for the next RDMA write of at most want bytes:
// peer ring space, a message credit and a send queue slot, and send buffer
// space when not inline. It returns the size claimed, 0 when something is
// exhausted, and the peer address to write it at.
//
// It waits for room for a whole chunk (or all of want, if less) rather than
// posting whatever sliver completions or credits have just freed: that would
// shred a stream into tiny writes (silly window syndrome). The wait always
// ends: ring credit comes back in quarter-ring steps, and when the send
// buffer is more than half full every send is signaled.
func (c *Conn) reserveLocked(want int) (n int, at uint64, inline bool) {
	if c.tx.Credits < 2 || c.sqPosted-c.sqDone+c.sqReserved >= c.sqDepth {
		return 0, 0, false
	}
	n64 := min(uint64(want), uint64(c.chunk))
	free, toEnd := c.tx.Room()
	if free < n64 {
		return 0, 0, false
	}
	n64 = min(n64, toEnd) // one write does not wrap the ring
	if int(n64) > c.inline {
		free := uint64(len(c.sbuf)) - (c.sbTail - c.sbHead)
		contig := uint64(len(c.sbuf)) - c.sbTail&c.sbufMask
		pad := uint64(0)
		if contig < n64 {
			pad = contig // skip the buffer's tail rather than post a sliver from it
		}
		if free < pad+n64 {
			return 0, 0, false
		}
		// Nothing is reserved and unposted here (the writer posts before it
		// reserves again), so the pad counts as posted at once.
		c.sbTail += pad
		c.sbPosted += pad
	}
	n = int(n64)
	return n, c.tx.Reserve(n64), n <= c.inline
}

// enqueueDataLocked queues the data write of buf (in the send buffer or an
// inline slot) to peer address at.
func (c *Conn) enqueueDataLocked(buf []byte, at uint64, flags verbs.SendFlags) {
	n := uint64(len(buf))
	if flags&verbs.SendInline == 0 {
		c.sbPosted += n
	}
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmData(int(n)), buf, at, flags, false)
}

// enqueueLocked queues one send WR into the peer ring (data, credit,
// control, probe), signaled when due, and counts it as posted. submit then
// hands the queue to the QP outside mu, so that a post (which on soft
// writes to a socket) never holds up completion processing or Read.
func (c *Conn) enqueueLocked(op verbs.Opcode, imm uint32, buf []byte, addr uint64, flags verbs.SendFlags, signal bool) {
	seq := c.sqPosted
	slot := seq % uint64(len(c.sq))
	if signal || c.unsignaled+1 >= c.sigEvery ||
		c.sqPosted+1-c.sqDone+c.sqReserved >= c.sqDepth/2 ||
		c.sbTail-c.sbHead >= uint64(len(c.sbuf))/2 {
		flags |= verbs.SendSignaled
		c.unsignaled = 0
	} else {
		c.unsignaled++
	}
	var sg []verbs.SGE
	if len(buf) > 0 {
		c.sqSGE[slot] = verbs.SGE{Addr: verbs.AddrOf(buf), Length: uint32(len(buf)), LKey: c.sendMR.LKey()}
		sg = c.sqSGE[slot : slot+1]
	}
	c.sq[slot] = verbs.SendWR{
		WRID:       seq,
		Opcode:     op,
		Flags:      flags,
		SG:         sg,
		Imm:        imm,
		RemoteAddr: addr,
		RKey:       c.tx.RKey,
	}
	c.sqEnds[slot] = c.sbPosted
	c.sqPosted++
}

// submit posts the queued send WRs, in order. One goroutine at a time holds
// the role; WRs queued meanwhile by others are posted by it. It returns the
// error of a post this call made.
func (c *Conn) submit() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.submitting {
		return nil
	}
	c.submitting = true
	defer func() { c.submitting = false }()
	for c.sqSubmitted != c.sqPosted {
		if c.torn {
			return verbs.ErrClosed
		}
		n := uint64(len(c.sq))
		h, t := c.sqSubmitted%n, c.sqPosted%n
		if t <= h {
			t = n
		}
		batch := c.sq[h:t]
		c.mu.Unlock()
		err := c.qp.PostSend(batch)
		c.mu.Lock()
		c.sqSubmitted += t - h
		if err != nil {
			c.failLocked(err)
			return err
		}
	}
	return nil
}

// creditLocked returns ring and receive credit to the peer when a quarter of
// either window is owed (or when force and anything is).
func (c *Conn) creditLocked(force bool) {
	if c.err != nil || c.torn {
		return
	}
	recvs, units, due := c.rx.CreditDue(force)
	if !due {
		c.creditWant = false
		return
	}
	if c.tx.Credits < 1 || c.sqPosted-c.sqDone+c.sqReserved >= c.sqDepth {
		c.creditWant = true // retried when completions free what is missing
		return
	}
	c.creditWant = false
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCredit(recvs, units), nil, c.tx.Addr, 0, false)
	c.tx.Credits--
	c.rx.Credit(recvs, units)
}

// sendFinLocked queues the FIN. The caller made sure a queue slot and two
// message credits are free, and submits afterwards.
func (c *Conn) sendFinLocked() {
	c.enqueueLocked(verbs.OpRDMAWriteWithImm, stream.ImmCtl(stream.CtlFin), nil, c.tx.Addr, 0, true)
	c.finSent = true
	c.tx.Credits--
}

// postProbeLocked queues a signaled zero-length RDMA write: no receive is
// consumed at the peer, yet the transport must deliver it, so it detects a
// dead peer (keepalive), drains the send queue (Close) and, on a QP in
// error, completes with a flush error that wakes the poller.
func (c *Conn) postProbeLocked() bool {
	if c.torn || c.sqPosted-c.sqDone+c.sqReserved > c.sqDepth {
		return false
	}
	c.enqueueLocked(verbs.OpRDMAWrite, 0, nil, c.tx.Addr, 0, true)
	return true
}

// failLocked records why the connection failed (the first reason wins) and
// wakes every waiter.
func (c *Conn) failLocked(err error) {
	if c.err == nil {
		c.err = err
	}
	poke(c.rcvReady)
	poke(c.sndReady)
	if c.polling {
		c.interrupt()
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// handle applies a batch of completions.
func (c *Conn) handle(wcs []verbs.WC) {
	var rcvChanged, sndChanged bool
	var perr error
	reposts := 0
	c.mu.Lock()
	for i := range wcs {
		wc := &wcs[i]
		if wc.WRID&recvWRID != 0 {
			c.recvPosted--
			rcvChanged = true
			if wc.Status != verbs.WCSuccess {
				c.failLocked(wcError(wc.Status))
				continue
			}
			reposts++
			if perr == nil && c.err == nil {
				perr = c.recvLocked(wc, &sndChanged)
			}
			continue
		}
		seq := wc.WRID
		if seq < c.sqDone || seq >= c.sqPosted {
			c.failLocked(errStraySend)
			continue
		}
		c.sqDone = seq + 1
		c.sbHead = c.sqEnds[seq%uint64(len(c.sqEnds))]
		sndChanged = true
		if wc.Status != verbs.WCSuccess {
			c.failLocked(wcError(wc.Status))
		}
	}
	if perr != nil {
		c.failLocked(perr)
	}
	if reposts > 0 && c.err == nil && !c.torn {
		if err := c.qp.PostRecv(c.rwrs[:reposts]); err != nil {
			c.failLocked(err)
		} else {
			c.recvPosted += reposts
			c.rx.Owed += reposts
		}
	}
	c.creditLocked(false)
	if rcvChanged {
		poke(c.rcvReady)
	}
	if sndChanged {
		poke(c.sndReady)
	}
	c.unlockSubmit()
	if perr != nil {
		// Tell the peer: it gets a disconnect, we keep our error.
		_ = c.id.Disconnect()
	}
}

// recvLocked applies one message from the peer; the stream's rules check
// every value in it: a peer that breaks them gets its connection failed,
// nothing more.
func (c *Conn) recvLocked(wc *verbs.WC, sndChanged *bool) error {
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
		return protoError(stream.ErrNoImm)
	}
	kind, err := stream.Receive(&c.rx, &c.tx, wc.Imm, wc.ByteLen)
	if err != nil {
		return protoError(err)
	}
	if kind == stream.KindCredit {
		*sndChanged = true
	}
	return nil
}

// wcError turns a failed completion into the connection's error.
func wcError(s verbs.WCStatus) error {
	switch s {
	case verbs.WCWRFlushErr:
		return errReset
	case verbs.WCRetryExcErr:
		return errRetry
	case verbs.WCRNRRetryExcErr:
		return errRNR
	}
	return &connError{"work completion failed: " + s.String(), syscall.EIO}
}

// cmLoop watches the connection manager's events and probes an idle
// connection every KeepAlive; it waits on the event channel, which parks on
// the runtime poller.
func (c *Conn) cmLoop() {
	defer close(c.cmDone)
	for {
		var dl time.Time
		if c.cfg.KeepAlive > 0 {
			dl = time.Now().Add(c.cfg.KeepAlive)
		}
		ev, err := c.ech.GetEvent(dl)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.keepalive()
			continue
		}
		if err != nil {
			return
		}
		switch ev.Type {
		case verbs.EventDisconnected, verbs.EventDeviceRemoval:
			// The QP is in error and its receives flush, which wakes the
			// poller; a probe makes sure of it even with none outstanding.
			c.mu.Lock()
			if !c.closed && !c.torn && !c.postProbeLocked() && !c.rx.FinRcvd {
				c.failLocked(errReset)
			}
			c.unlockSubmit()
		}
	}
}

// keepalive probes the peer when no signaled send is outstanding (if one
// is, the transport's retry timeout already watches the peer). Unsignaled
// sends at the tail do not count: the transport may have delivered them long
// ago and watch nothing, and only a signaled WR behind them reports them.
//
// An idle connection's completions (an earlier probe's, say) wait in the
// CQ for the next Read or Write; the keepalive applies them first, when no
// caller holds the poll role, so that its view of the send queue is fresh.
func (c *Conn) keepalive() {
	c.tryPoll()
	c.mu.Lock()
	if !c.closed && !c.torn && c.err == nil && c.sqReserved == 0 && (c.sqPosted == c.sqDone || c.unsignaled > 0) {
		c.postProbeLocked()
	}
	c.unlockSubmit()
}

// unlockSubmit releases mu and submits what was queued under it, unless a
// submit in progress will.
func (c *Conn) unlockSubmit() {
	pending := c.sqSubmitted != c.sqPosted && !c.submitting
	c.mu.Unlock()
	if pending {
		c.submit()
	}
}

// CloseWrite shuts down the sending side, as (*net.TCPConn).CloseWrite does:
// the peer reads what was written, then io.EOF; reading goes on.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return c.opErr("close", net.ErrClosed)
		case c.finSent:
			c.mu.Unlock()
			return nil
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return c.opErr("close", err)
		}
		if c.tx.Credits >= 2 && c.sqPosted-c.sqDone+c.sqReserved < c.sqDepth {
			c.sendFinLocked()
			c.mu.Unlock()
			if err := c.submit(); err != nil {
				return c.opErr("close", err)
			}
			return nil
		}
		c.mu.Unlock()
		c.await(c.sndReady, nil, false)
	}
}

// Close closes the connection. Bytes already written are delivered (within
// HandshakeTimeout), then the peer reads io.EOF. Pending Reads and Writes
// return net.ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	c.closed = true
	close(c.closedCh)
	if c.polling {
		c.interrupt()
	}
	c.mu.Unlock()
	// Wait for Reads and Writes in progress to leave the buffers.
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.drain()
	_ = c.id.Disconnect()
	c.releaseVerbs()
	c.id.Destroy()
	c.ech.Close() // ends cmLoop
	<-c.cmDone
	c.rdl.stop()
	c.wdl.stop()
	return nil
}

// drain posts the FIN and waits until every posted send has completed, so
// that the disconnect that follows loses nothing.
func (c *Conn) drain() {
	dl := makeDeadline()
	dl.set(time.Now().Add(c.cfg.HandshakeTimeout))
	defer dl.stop()
	for {
		c.mu.Lock()
		queued := false
		switch {
		case c.err != nil:
			c.mu.Unlock()
			return
		case !c.finSent:
			if c.tx.Credits >= 2 && c.sqPosted-c.sqDone < c.sqDepth {
				c.sendFinLocked()
				queued = true
			}
		case c.sqDone == c.sqPosted:
			c.mu.Unlock()
			return
		case c.unsignaled > 0:
			// The last send is unsignaled: nothing would report it.
			if !c.postProbeLocked() {
				c.mu.Unlock()
				return
			}
			queued = true
		}
		c.mu.Unlock()
		if queued {
			c.submit()
			continue
		}
		if dl.passed() {
			return
		}
		c.await(c.sndReady, &dl, true)
	}
}

// releaseVerbs destroys the verbs objects newConn created, in the order the
// verbs require.
func (c *Conn) releaseVerbs() {
	c.mu.Lock()
	c.torn = true
	// A post in flight, or a poll (the keepalive's), must finish before
	// the QP and CQ go.
	for c.submitting || c.polling {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	c.mu.Unlock()
	if c.qp != nil {
		c.qp.Destroy()
	}
	if c.cq != nil {
		if c.poll.unacked > 0 {
			c.cch.AckEvents(c.cq, c.poll.unacked)
			c.poll.unacked = 0
		}
		c.cq.Destroy()
	}
	if c.cch != nil {
		c.cch.Close()
	}
	if c.sendMR != nil {
		c.sendMR.Dereg()
	}
	if c.ringMR != nil {
		c.ringMR.Dereg()
	}
	if c.pd != nil {
		c.pd.Dealloc()
	}
	if c.mem != nil {
		c.mem.Free()
	}
}

// LocalAddr returns the local address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// Provider names the verbs provider that carries the connection: "soft" or
// "rdmacore".
func (c *Conn) Provider() string { return c.provider }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.checkOpen("set deadline"); err != nil {
		return err
	}
	c.rdl.set(t)
	c.wdl.set(t)
	c.deadlineMoved()
	return nil
}

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if err := c.checkOpen("set read deadline"); err != nil {
		return err
	}
	c.rdl.set(t)
	c.deadlineMoved()
	return nil
}

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if err := c.checkOpen("set write deadline"); err != nil {
		return err
	}
	c.wdl.set(t)
	c.deadlineMoved()
	return nil
}

func (c *Conn) checkOpen(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr(op, net.ErrClosed)
	}
	return nil
}

func (c *Conn) opErr(op string, err error) error {
	var src, dst net.Addr
	if c.laddr != nil {
		src = c.laddr
	}
	if c.raddr != nil {
		dst = c.raddr
	}
	return opError(op, src, dst, err)
}
