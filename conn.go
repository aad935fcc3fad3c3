package rdma

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/connface"
	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/debuglog"
	"github.com/rdmanet/rdma/internal/onesided"
	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// Conn is a net.Conn carried by an RDMA reliable connection. It is safe for
// concurrent use: Reads are serialised among themselves, Writes too, and a
// Read and a Write run in parallel.
type Conn struct {
	// The net.Conn face (connface.go); its core.Mu guards the fields below
	// it marks so.
	connFace
	endpoint // the verbs resources (endpoint.go), released by Close

	cfg        Config
	peerRDMACM bool // the listener said it takes RDMA CM connections too (mixed.go)

	sendSide // what this side writes to the peer, and owes it (under mu)
	recvSide // what the peer writes to this side (under mu)

	// The state of a connection that used Buffers, exposures or the
	// rendezvous (zerocopy.go; nil until then), and the registrations in
	// progress outside mu (regMR).
	zc          *zeroCopy
	registering int
}

// sendSide is the half of a Conn that writes to the peer, guarded by mu:
// what it may write into the peer's ring (the stream's send window), the
// send staging and queue (internal/sendq), and the messages it owes.
type sendSide struct {
	tx    stream.Send
	sb    sendq.Buffer // the send staging
	sq    sendq.Queue  // the send queue
	chunk int          // largest single RDMA write

	// The rendezvous threshold agreed (0: none; rndv.go), and how soon the
	// peer wants its pings answered (0: it sends none; heartbeat.go).
	rndvMin  int
	peerBeat time.Duration

	creditWant  bool // a credit update is due but could not be queued
	rndvDoneDue bool // a rendezvous' done message is owed to the peer (rndv.go)
	pongDue     bool // a ping waits for its pong to be queued (heartbeat.go)
	finSent     bool
}

// recvSide is the half of a Conn that the peer writes to, guarded by mu:
// what the peer may write into our ring (the stream's receive window), the
// receive WRs and their reposting, and the notifications held.
type recvSide struct {
	rx         stream.Recv
	recvPosted int // receive WRs outstanding on the QP
	// Receives are reposted in batches of repostBatch (a post is a call
	// into the provider, on the path from a message's arrival to the Read
	// that returns it): repostDue consumed since the last batch, of which
	// repostHeld carried notifications.
	repostDue, repostHeld, repostBatch int

	// Notifications from the peer, not yet taken: each holds back the
	// credit of its receive WR until then.
	notes onesided.NoteQueue

	// The messages received so far: each is a sign of life (heartbeat.go).
	received uint64
}

// newConn sets up a connection on id: its verbs resources, and its
// receives posted.
func newConn(provider string, ech verbs.EventChannel, id verbs.CMID, cfg Config, grow bool) (*Conn, error) {
	e, sbuf, err := newEndpoint(provider, ech, id, cfg, grow)
	if err != nil {
		return nil, err
	}
	c := &Conn{endpoint: e, cfg: cfg}
	c.init(provider, c.poller())
	c.sb = sendq.NewBuffer(sbuf)
	c.sq = sendq.NewQueue(e.sendWRs, e.slots)
	if err = c.postRecvs(e.recvWRs); err != nil {
		c.releaseVerbs()
		return nil, err
	}
	c.recvPosted = e.recvWRs
	c.repostBatch = max(e.recvWRs/16, 1)
	c.rx = stream.NewRecv(stream.RingLog(len(c.ring)), stream.RingLog(cfg.RingSize), e.recvWRs)
	return c, nil
}

// hello is this side's half of the handshake.
func (c *Conn) hello() stream.Hello {
	h := stream.Hello{
		Version:   stream.Version,
		RecvDepth: uint16(c.recvWRs),
		RingAddr:  c.ep.RingMR.Addr(),
		RingKey:   c.ep.RingMR.RKey(),
		RingLog:   stream.RingLog(len(c.ring)),
		GrowLog:   c.rx.GrowLog,
	}
	if c.cfg.PeerTimeout > 0 {
		l := stream.NewLiveness(c.cfg.PeerTimeout, time.Time{})
		h.Heartbeat = l.Heartbeat()
	}
	return h
}

// setPeer takes in the peer's hello; the version agreed is the lower of
// the two.
func (c *Conn) setPeer(h stream.Hello) {
	agreed := min(h.Version, stream.Version)
	c.rx.Agree(agreed)
	c.tx = stream.NewSend(h, agreed)
	stream.AgreeRndv(&c.rx, &c.tx, agreed)
	c.rndvMin = c.rndvThreshold(agreed)
	c.setChunkLocked() // the first bound on a write: the peer's ring is known now
	c.peerRDMACM = h.Flags&stream.FlagRDMACM != 0
	if agreed >= stream.VersionHeartbeat {
		c.rx.Pings = true
		c.peerBeat = stream.AnswerWithin(h.Heartbeat)
	}
}

// takeAnswer takes in the listener's hello.
func (c *Conn) takeAnswer(private []byte) error {
	peer, err := stream.ParseHello(private)
	switch {
	case err != nil:
		return err
	case peer.Version > stream.Version:
		// A listener answers with the lower of the two versions.
		return fmt.Errorf("%w: the listener answered with version %d, above ours (%d)", stream.ErrHello, peer.Version, stream.Version)
	}
	c.setPeer(peer)
	return nil
}

// start runs the connection once it is established.
func (c *Conn) start() {
	c.established(c.ep.ID.LocalAddr(), c.ep.ID.RemoteAddr())
	c.core.Poll.Configure(c.cfg.pollTime(), c.cfg.busyPoll(), c.provider == ProviderSoft)
	w := c.newWatch(time.Now()) // heartbeat.go
	c.core.Watch = cmwatch.Start(c.ep.Events, w, w.sched.Next)
	register(c) // registry.go
	c.logEstablished()
}

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has closed its sending side and everything before
// that was read.
func (c *Conn) Read(b []byte) (int, error) {
	c.core.ReadMu.Lock()
	defer c.core.ReadMu.Unlock()
	for {
		c.core.Mu.Lock()
		if err := c.core.ReadStopLocked(); err != nil {
			c.core.Mu.Unlock()
			return 0, err
		}
		if zc := c.zc; zc != nil && zc.bounce.Pending() && len(b) > 0 {
			// A rendezvous READ's bytes, before anything after it.
			n := zc.bounce.Read(b)
			c.core.Counters.ReadLocked(n) // stats.go
			c.core.Mu.Unlock()
			return n, nil
		}
		if avail := c.rx.Buffered(); avail > 0 {
			if len(b) == 0 {
				c.core.Mu.Unlock()
				return 0, nil
			}
			ring, off, span := c.readRingLocked()
			n := int(min(span, uint64(len(b))))
			c.core.Mu.Unlock()
			// The bytes are ours until we credit them back: no lock needed
			// (and the previous ring is released by the reader only).
			first := min(n, len(ring)-int(off))
			copy(b, ring[off:int(off)+first])
			copy(b[first:n], ring)
			c.core.Mu.Lock()
			c.rx.Consume(n)
			c.core.Counters.ReadLocked(n)
			c.leftPrevRingLocked()
			c.creditLocked(false)
			c.unlockSubmit()
			return n, nil
		}
		if addr, key, left := c.rx.RndvNext(); left > 0 && len(b) > 0 {
			c.core.Mu.Unlock()
			n, err := c.readRndv(b, addr, key, left)
			c.read(n)
			return n, err
		}
		if c.rx.FinRcvd {
			c.core.Mu.Unlock()
			return 0, io.EOF
		}
		if c.core.Err != nil {
			err := c.core.Err
			c.core.Mu.Unlock()
			return 0, c.opErr("read", err)
		}
		if len(b) == 0 {
			c.core.Mu.Unlock()
			return 0, nil
		}
		c.core.Mu.Unlock()
		c.await(c.core.RcvReady, &c.core.ReadDL, false)
	}
}

// Write writes b to the connection. It returns once all of b is posted to the
// send queue (copied into registered memory, so b may be reused), or with an
// error; a short count comes with the error. A b of at least
// Config.RendezvousThreshold bytes inside a Buffer is not copied: the peer
// reads it from there (rndv.go), and Write returns once it has, with b's
// exposure to the peer revoked. No buffer absorbs such a Write: it waits
// for the peer's Read, so two ends that both write one before reading
// deadlock (as MPI's rendezvous sends do). A deadline or Close that cuts
// such a Write short fails the connection (the peer may be mid-read).
func (c *Conn) Write(b []byte) (int, error) {
	c.core.WriteMu.Lock()
	defer c.core.WriteMu.Unlock()
	if c.rndvMin > 0 && len(b) >= c.rndvMin {
		if buf := bufferOf(b); buf != nil {
			return c.writeRndv(b, buf) // rndv.go
		}
	}
	for sent := 0; ; {
		if sent == len(b) && sent > 0 {
			return sent, nil
		}
		c.core.Mu.Lock()
		if over, err := c.core.WriteOverLocked(c.writeErrLocked(), sent, len(b)); over {
			c.core.Mu.Unlock()
			return sent, err
		}
		n, at, inline := c.reserveLocked(len(b) - sent)
		if n == 0 {
			c.core.Mu.Unlock()
			c.awaitRoom()
			continue
		}
		p := b[sent : sent+n]
		var buf []byte
		var flags verbs.SendFlags
		if inline {
			// Each queue slot has its own inline staging, so the bytes
			// stay put until whoever posts the queue gets to them.
			buf, flags = c.inlineSlotLocked(n), verbs.SendInline
			copy(buf, p)
		} else {
			buf = c.sb.Reserve(uint64(n))
			c.sq.Reserved++
			c.core.Mu.Unlock()
			// The reserved bytes are the writer's alone until queued.
			copy(buf, p)
			c.core.Mu.Lock()
			c.sq.Reserved--
			// Reserved ring space must be filled, or the stream would
			// desynchronise: only a failed connection stops it now.
			if err := c.core.Err; err != nil {
				c.core.Mu.Unlock()
				return sent, c.opErr("write", err)
			}
		}
		c.enqueueDataLocked(buf, at, flags, sent == 0)
		c.core.Mu.Unlock()
		c.submit()
		sent += n
	}
}

// writeErrLocked says why a Write cannot go on, or nil.
func (c *Conn) writeErrLocked() error {
	if err := c.core.StopErrLocked(&c.core.WriteDL); err != nil {
		return err
	}
	if c.finSent {
		return core.ErrWriteClosed
	}
	return c.core.Err
}

// CloseWrite shuts down the sending side, as (*net.TCPConn).CloseWrite does:
// the peer reads what was written, then io.EOF; reading goes on.
func (c *Conn) CloseWrite() error { return c.poller().CloseWrite((*connCore)(c)) }

func (c *Conn) writeShutLocked() bool { return c.finSent }

func (c *Conn) shutWriteLocked() (bool, error) {
	if !c.canSendData() {
		return false, nil
	}
	c.sendFinLocked()
	return true, nil
}

func (c *Conn) flush() error { return c.submit() }

func (c *Conn) drainTime() time.Duration { return c.cfg.HandshakeTimeout }

// Close closes the connection. Bytes already written are delivered (within
// HandshakeTimeout), then the peer reads io.EOF. Pending Reads and Writes
// return net.ErrClosed.
func (c *Conn) Close() error { return closeConn(c, c.poller(), (*connCore)(c)) }

// drain posts the FIN and waits until every posted send has completed, so
// that the disconnect that follows loses nothing.
func (c *Conn) drain(dl *core.Deadline) {
	for {
		c.core.Mu.Lock()
		queued := false
		switch {
		case c.core.Err != nil:
			c.core.Mu.Unlock()
			return
		case !c.finSent:
			if c.canSendData() { // no writer reserves: Close holds wmu
				c.sendFinLocked()
				queued = true
			}
		case c.sq.Idle():
			c.core.Mu.Unlock()
			return
		case c.sq.Unsignaled > 0:
			// The last send is unsignaled: nothing would report it.
			if !c.postProbeLocked() {
				c.core.Mu.Unlock()
				return
			}
			queued = true
		}
		c.core.Mu.Unlock()
		if queued {
			c.submit()
			continue
		}
		if dl.Passed() {
			return
		}
		c.await(c.core.SndReady, dl, true)
	}
}

// TrafficClass is the traffic class (IP type of service) the connection's
// packets carry, as its queue pair reports it: the address vector's on
// rdmacore, the TCP socket's IP_TOS read back on soft. See
// Config.TrafficClass.
func (c *Conn) TrafficClass() (int, error) { return c.trafficClass(&c.endpoint) }

// observeStats is the watch's look at the counters (heartbeat.go's tick).
func (c *Conn) observeStats(now time.Time) {
	c.core.Mu.Lock()
	c.core.Counters.SeeLocked(now)
	c.core.Mu.Unlock()
}

// Stats returns what the connection has done so far and its sizes now. It
// takes the connection's lock briefly; the data path keeps running.
func (c *Conn) Stats() ConnStats {
	s := c.snapshot("stream", &c.endpoint, func(s *connstats.Snapshot, st *connstats.Counters) error {
		s.RingSize, s.PeerRingSize = len(c.ring), int(c.tx.Size)
		s.SendDepth, s.RecvDepth = int(c.sq.Depth), c.recvWRs
		s.SendsPending, s.RecvsPosted = int(c.sq.Posted-c.sq.Done), c.recvPosted
		s.Credits, s.Buffered = c.tx.Credits, int(c.rx.Buffered())
		s.SendBufferSize, s.SendBuffered = len(c.sb.Buf), int(c.sb.InFlight())
		s.RingGrowths, s.SendBufferGrowths, s.QueueTrims = st.RingGrowths, st.SendGrowths, st.Trims
		s.RingWaits, s.SendBufferWaits, s.ReadWaits = st.RingWaits, st.SendBufWaits, st.ReadWaits
		s.Spins, s.SpinsCaught, s.Sleeps = st.Spins, st.Caught, st.Sleeps
		s.KeepAlives, s.PingsSent, s.PongsRecv = st.Keepalives, st.PingsSent, st.PongsRecv
		s.PingsRecv, s.PongsSent = st.PingsRecv, st.PongsSent
		s.RendezvousSent, s.RendezvousWindowed, s.RendezvousReceived = st.RndvSent, st.RndvWindowed, st.RndvRecv
		if c.zc != nil {
			s.Exposed = c.zc.exposures.Live()
		}
		return c.failureLocked()
	})
	s.LastSeenStep = c.watchStep()
	return s
}

// failureLocked is the connection's failure, if it failed: not the reset
// that follows the peer's orderly close (its FIN, then its disconnect
// flushes our queue), which ends every connection the peer closes.
func (c *Conn) failureLocked() error {
	if c.rx.FinRcvd && c.core.Err == core.ErrReset {
		return nil
	}
	return c.core.Err
}

// watchStep is how often the watch looks at the counters, or 0.
func (c *Conn) watchStep() time.Duration {
	step := c.cfg.KeepAlive
	if b := c.cfg.PeerTimeout / 5; b > 0 && (step <= 0 || b < step) {
		step = b
	}
	return max(step, 0)
}

// logEstablished logs what carries a new connection: the provider, the
// device and, on soft, the path and why it is not shared memory when it
// is not.
func (c *Conn) logEstablished() {
	if !debuglog.On(debuglog.Dial, slog.LevelInfo) && !debuglog.On(debuglog.Shm, slog.LevelInfo) {
		return
	}
	dev := ""
	if ctx := c.ep.ID.Context(); ctx != nil {
		dev = ctx.Name()
	}
	path := connface.PathOf(c.provider, c.ep.QP)
	qp := c.ep.QP
	if debuglog.On(debuglog.Dial, slog.LevelInfo) {
		debuglog.Log("dial", slog.LevelInfo, "connection established", "provider", c.provider,
			"device", dev, "path", path, "local", addrString(c.localAddr()), "peer", addrString(c.remoteAddr()))
	}
	if c.provider == ProviderSoft && debuglog.On(debuglog.Shm, slog.LevelInfo) {
		if path == "soft-shm" {
			debuglog.Log("shm", slog.LevelInfo, "shared memory in use", "peer", addrString(c.remoteAddr()))
		} else {
			debuglog.Log("shm", slog.LevelInfo, "shared memory not used", "peer", addrString(c.remoteAddr()), "reason", shmReason(c.localAddr(), c.remoteAddr(), qp))
		}
	}
}

// logFailure logs a connection's failure and its cause (with mu held).
func (c *Conn) logFailure(err error) {
	if c.failureLocked() == nil {
		return // the peer closed
	}
	if debuglog.On(debuglog.Conn, slog.LevelWarn) {
		debuglog.Log("conn", slog.LevelWarn, "connection failed", "provider", c.provider,
			"local", addrString(c.localAddr()), "peer", addrString(c.remoteAddr()), "err", err.Error())
	}
}

// logGrowth logs a ring or send buffer moving to a larger one.
func (c *Conn) logGrowth(what string, from, to int) {
	if debuglog.On(debuglog.Ring, slog.LevelInfo) {
		debuglog.Log("ring", slog.LevelInfo, what+" grew", "peer", addrString(c.remoteAddr()), "from", from, "to", to)
	}
}

func (c *Conn) peerTakesRDMACM() bool { return c.peerRDMACM }

// postRecvs posts n receive WRs.
func (c *Conn) postRecvs(n int) error {
	for n > 0 {
		k := min(n, recvBatch)
		if err := c.ep.QP.PostRecv(recvWRs[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// releaseVerbs destroys the connection's verbs objects once no post or
// poll is in flight; none is started afterwards.
func (c *Conn) releaseVerbs() {
	c.core.Mu.Lock()
	c.core.Torn = true
	// A post in flight, or a poll (the keepalive's), must finish before
	// the QP and CQ go; a registration, before the protection domain.
	for c.sq.Submitting || c.core.Poll.Held || c.registering > 0 {
		c.core.Mu.Unlock()
		runtime.Gosched()
		c.core.Mu.Lock()
	}
	c.core.Mu.Unlock()
	held := c.releaseZeroCopy() // zerocopy.go: before the protection domain goes
	c.endpoint.release(c.core.Poll.Unacked)
	c.core.Poll.Unacked = 0
	for _, b := range held {
		b.release()
	}
}
