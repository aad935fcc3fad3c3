package streamconn

import (
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/rdmanet/rdma/verbs/soft"
)

// Conn is the engine of one rdma.Conn: a net.Conn carried by an RDMA
// reliable connection. It is safe for concurrent use: Reads are serialised
// among themselves, Writes too, and a Read and a Write run in parallel.
type Conn struct {
	// The net.Conn face (internal/connface); its Core.Mu guards the
	// fields below it marks so.
	connface.Face
	EP       core.Endpoint // the verbs objects (internal/core), created and released in the order the verbs require
	endpoint               // rdma.Conn's memory layout on them (endpoint.go), released by Close

	Cfg        Config
	peerRDMACM bool // the listener said it takes RDMA CM connections too (the root package's mixed.go)

	sendSide // what this side writes to the peer, and owes it (under mu)
	recvSide // what the peer writes to this side (under mu)

	// The state of a connection that used Buffers, exposures or the
	// rendezvous (zerocopy.go; nil until then), and the registrations in
	// progress outside mu (regMR).
	ZC          *zeroCopy
	registering int
}

// sendSide is the half of a Conn that writes to the peer, guarded by mu:
// what it may write into the peer's ring (the stream's send window), the
// send staging and queue (internal/sendq), and the messages it owes.
type sendSide struct {
	TX    stream.Send
	SB    sendq.Buffer // the send staging
	SQ    sendq.Queue  // the send queue
	chunk int          // largest single RDMA write

	// The rendezvous threshold agreed (0: none; rndv.go), and how soon the
	// peer wants its pings answered (0: it sends none; heartbeat.go).
	RndvMin  int
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
	RX         stream.Recv
	recvPosted int // receive WRs outstanding on the QP
	// Receives are reposted in batches of repostBatch (a post is a call
	// into the provider, on the path from a message's arrival to the Read
	// that returns it): repostDue consumed since the last batch, of which
	// repostHeld carried notifications.
	repostDue, repostHeld, repostBatch int

	// Notifications from the peer, not yet taken: each holds back the
	// credit of its receive WR until then.
	Notes onesided.NoteQueue

	// The messages received so far: each is a sign of life (heartbeat.go).
	Received uint64
}

// Init sets up a connection on id: its verbs resources, and its receives
// posted. cfg is the public Config with its defaults filled in, PollTime
// resolved (0: never poll) and BusyPoll with its environment variable.
// On failure it releases what it created (not ech and id, which stay the
// caller's).
func (c *Conn) Init(provider string, ech verbs.EventChannel, id verbs.CMID, cfg Config, grow bool) error {
	e, sbuf, err := newEndpoint(&c.EP, provider, ech, id, cfg, grow)
	if err != nil {
		return err
	}
	c.endpoint, c.Cfg = e, cfg
	c.Face.Init(provider, c.poller())
	c.SB = sendq.NewBuffer(sbuf)
	c.SQ = sendq.NewQueue(e.sendWRs, e.Slots)
	if err = c.recv().postRecvs(e.recvWRs); err != nil {
		c.ReleaseVerbs()
		return err
	}
	c.recvPosted = e.recvWRs
	c.repostBatch = max(e.recvWRs/16, 1)
	c.RX = stream.NewRecv(stream.RingLog(len(c.Ring)), stream.RingLog(cfg.RingSize), e.recvWRs)
	return nil
}

// handshake is the connection's part that speaks the hello (ours, the
// peer's, the listener's answer) and sets up the send and receive sides
// by what was agreed.
type handshake struct{ *Conn }

// Handshake is the connection's hello part.
func (c *Conn) Handshake() handshake { return handshake{c} }

// Hello is this side's half of the handshake.
func (c handshake) Hello() stream.Hello {
	h := stream.Hello{
		Version:   stream.Version,
		RecvDepth: uint16(c.recvWRs),
		RingAddr:  c.EP.RingMR.Addr(),
		RingKey:   c.EP.RingMR.RKey(),
		RingLog:   stream.RingLog(len(c.Ring)),
		GrowLog:   c.RX.GrowLog,
	}
	if c.Cfg.PeerTimeout > 0 {
		l := stream.NewLiveness(c.Cfg.PeerTimeout, time.Time{})
		h.Heartbeat = l.Heartbeat()
	}
	return h
}

// SetPeer takes in the peer's hello; the version agreed is the lower of
// the two.
func (c handshake) SetPeer(h stream.Hello) {
	agreed := min(h.Version, stream.Version)
	c.RX.Agree(agreed)
	c.TX = stream.NewSend(h, agreed)
	stream.AgreeRndv(&c.RX, &c.TX, agreed)
	c.RndvMin = c.RndvThreshold(agreed)
	c.send().setChunkLocked() // the first bound on a write: the peer's ring is known now
	c.peerRDMACM = h.Flags&stream.FlagRDMACM != 0
	if agreed >= stream.VersionHeartbeat {
		c.RX.Pings = true
		c.peerBeat = stream.AnswerWithin(h.Heartbeat)
	}
}

// TakeAnswer takes in the listener's hello.
func (c handshake) TakeAnswer(private []byte) error {
	peer, err := stream.ParseHello(private)
	switch {
	case err != nil:
		return err
	case peer.Version > stream.Version:
		// A listener answers with the lower of the two versions.
		return fmt.Errorf("%w: the listener answered with version %d, above ours (%d)", stream.ErrHello, peer.Version, stream.Version)
	}
	c.SetPeer(peer)
	return nil
}

// Start runs the connection once it is established; addr is a
// connection manager address as the public package shows it.
func (c *Conn) Start(addr func(*net.TCPAddr) net.Addr) {
	c.Established(addr(c.EP.ID.LocalAddr()), addr(c.EP.ID.RemoteAddr()))
	c.Core.Poll.Configure(c.Cfg.PollTime, c.Cfg.BusyPoll, c.Prov == soft.Name)
	w := newWatch(c, time.Now()) // heartbeat.go
	c.Core.Watch = cmwatch.Start(c.EP.Events, w, w.sched.Next)
	c.logEstablished()
}

// RdAtom is the RDMA READs in flight the connection takes, each way (its
// ConnParam's responder resources and initiator depth).
func (c *Conn) RdAtom() int { return c.rdAtom }

// Read reads data the peer wrote. It returns as soon as any data is there;
// io.EOF once the peer has closed its sending side and everything before
// that was read.
func (c *Conn) Read(b []byte) (int, error) {
	c.Core.ReadMu.Lock()
	defer c.Core.ReadMu.Unlock()
	for {
		c.Core.Mu.Lock()
		if err := c.Core.ReadStopLocked(); err != nil {
			c.Core.Mu.Unlock()
			return 0, err
		}
		if zc := c.ZC; zc != nil && zc.bounce.Pending() && len(b) > 0 {
			// A rendezvous READ's bytes, before anything after it.
			n := zc.bounce.Read(b)
			c.Core.Counters.ReadLocked(n) // internal/connstats
			c.Core.Mu.Unlock()
			return n, nil
		}
		if avail := c.RX.Buffered(); avail > 0 {
			if len(b) == 0 {
				c.Core.Mu.Unlock()
				return 0, nil
			}
			ring, off, span := c.readRingLocked()
			n := int(min(span, uint64(len(b))))
			c.Core.Mu.Unlock()
			// The bytes are ours until we credit them back: no lock needed
			// (and the previous ring is released by the reader only).
			first := min(n, len(ring)-int(off))
			copy(b, ring[off:int(off)+first])
			copy(b[first:n], ring)
			c.Core.Mu.Lock()
			c.RX.Consume(n)
			c.Core.Counters.ReadLocked(n)
			c.leftPrevRingLocked()
			c.send().creditLocked(false)
			c.send().unlockSubmit()
			return n, nil
		}
		if addr, key, left := c.RX.RndvNext(); left > 0 && len(b) > 0 {
			c.Core.Mu.Unlock()
			n, err := c.rndv().readRndv(b, addr, key, left)
			c.CountRead(n)
			return n, err
		}
		if c.RX.FinRcvd {
			c.Core.Mu.Unlock()
			return 0, io.EOF
		}
		if c.Core.Err != nil {
			err := c.Core.Err
			c.Core.Mu.Unlock()
			return 0, c.Core.OpErr("read", err)
		}
		if len(b) == 0 {
			c.Core.Mu.Unlock()
			return 0, nil
		}
		c.Core.Mu.Unlock()
		c.Await(c.Core.RcvReady, &c.Core.ReadDL, false)
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
	c.Core.WriteMu.Lock()
	defer c.Core.WriteMu.Unlock()
	if c.RndvMin > 0 && len(b) >= c.RndvMin {
		if buf := bufferOf(b); buf != nil {
			return c.rndv().writeRndv(b, buf) // rndv.go
		}
	}
	for sent := 0; ; {
		if sent == len(b) && sent > 0 {
			return sent, nil
		}
		c.Core.Mu.Lock()
		if over, err := c.Core.WriteOverLocked(c.writeErrLocked(), sent, len(b)); over {
			c.Core.Mu.Unlock()
			return sent, err
		}
		n, at, inline := c.send().reserveLocked(len(b) - sent)
		if n == 0 {
			c.send().unlockSubmit() // a probe reserveLocked queued
			c.awaitRoom()
			continue
		}
		p := b[sent : sent+n]
		var buf []byte
		var flags verbs.SendFlags
		if inline {
			// Each queue slot has its own inline staging, so the bytes
			// stay put until whoever posts the queue gets to them.
			buf, flags = c.send().inlineSlotLocked(n), verbs.SendInline
			copy(buf, p)
		} else {
			buf = c.SB.Reserve(uint64(n))
			c.SQ.Reserved++
			c.Core.Mu.Unlock()
			// The reserved bytes are the writer's alone until queued.
			copy(buf, p)
			c.Core.Mu.Lock()
			c.SQ.Reserved--
			// Reserved ring space must be filled, or the stream would
			// desynchronise: only a failed connection stops it now.
			if err := c.Core.Err; err != nil {
				c.Core.Mu.Unlock()
				return sent, c.Core.OpErr("write", err)
			}
		}
		c.send().enqueueDataLocked(buf, at, flags, sent == 0)
		c.Core.Mu.Unlock()
		c.send().submit()
		sent += n
	}
}

// writeErrLocked says why a Write cannot go on, or nil.
func (c *Conn) writeErrLocked() error {
	if err := c.Core.StopErrLocked(&c.Core.WriteDL); err != nil {
		return err
	}
	if c.finSent {
		return core.ErrWriteClosed
	}
	return c.Core.Err
}

// CloseWrite shuts down the sending side, as (*net.TCPConn).CloseWrite does:
// the peer reads what was written, then io.EOF; reading goes on.
func (c *Conn) CloseWrite() error { return c.poller().CloseWrite(c) }

func (c *sendSide) WriteShutLocked() bool { return c.finSent }

func (c *Conn) ShutWriteLocked() (bool, error) {
	if !c.CanSendData() {
		return false, nil
	}
	c.send().sendFinLocked()
	return true, nil
}

func (c *Conn) Flush() error { return c.send().submit() }

func (c *Conn) DrainTime() time.Duration { return c.Cfg.HandshakeTimeout }

// Close closes the connection. Bytes already written are delivered (within
// HandshakeTimeout), then the peer reads io.EOF. Pending Reads and Writes
// return net.ErrClosed.
func (c *Conn) Close() error { return c.poller().Close(c) }

// Drain posts the FIN and waits until every posted send has completed, so
// that the disconnect that follows loses nothing.
func (c *Conn) Drain(dl *core.Deadline) {
	for {
		c.Core.Mu.Lock()
		queued := false
		switch {
		case c.Core.Err != nil:
			c.Core.Mu.Unlock()
			return
		case !c.finSent:
			if c.CanSendData() { // no writer reserves: Close holds wmu
				c.send().sendFinLocked()
				queued = true
			}
		case c.SQ.Idle():
			c.Core.Mu.Unlock()
			return
		case c.SQ.Unsignaled > 0:
			// The last send is unsignaled: nothing would report it.
			if !c.send().postProbeLocked() {
				c.Core.Mu.Unlock()
				return
			}
			queued = true
		}
		c.Core.Mu.Unlock()
		if queued {
			c.send().submit()
			continue
		}
		if dl.Passed() {
			return
		}
		c.Await(c.Core.SndReady, dl, true)
	}
}

// TrafficClass is the traffic class (IP type of service) the connection's
// packets carry, as its queue pair reports it: the address vector's on
// rdmacore, the TCP socket's IP_TOS read back on soft. See
// Config.TrafficClass.
func (c *Conn) TrafficClass() (int, error) { return c.Face.TrafficClass(&c.EP) }

// Stats returns what the connection has done so far and its sizes now. It
// takes the connection's lock briefly; the data path keeps running.
func (c *Conn) Stats() connstats.Snapshot {
	s := c.Snapshot("stream", &c.EP, func(s *connstats.Snapshot, st *connstats.Counters) error {
		s.RingSize, s.PeerRingSize = len(c.Ring), int(c.TX.Size)
		s.SendDepth, s.RecvDepth = int(c.SQ.Depth), c.recvWRs
		s.SendsPending, s.RecvsPosted = int(c.SQ.Posted-c.SQ.Done), c.recvPosted
		s.Credits, s.Buffered = c.TX.Credits, int(c.RX.Buffered())
		s.SendBufferSize, s.SendBuffered = len(c.SB.Buf), int(c.SB.InFlight())
		s.RingGrowths, s.SendBufferGrowths, s.QueueTrims = st.RingGrowths, st.SendGrowths, st.Trims
		s.RingWaits, s.SendBufferWaits, s.ReadWaits = st.RingWaits, st.SendBufWaits, st.ReadWaits
		s.KeepAlives, s.PingsSent, s.PongsRecv = st.Keepalives, st.PingsSent, st.PongsRecv
		s.PingsRecv, s.PongsSent = st.PingsRecv, st.PongsSent
		s.RendezvousSent, s.RendezvousWindowed, s.RendezvousReceived = st.RndvSent, st.RndvWindowed, st.RndvRecv
		if c.ZC != nil {
			s.Exposed = c.ZC.exposures.Live()
		}
		return c.failureLocked()
	})
	s.LastSeenStep = watchStep(c.Cfg)
	return s
}

// failureLocked is the connection's failure, if it failed: not the reset
// that follows the peer's orderly close (its FIN, then its disconnect
// flushes our queue), which ends every connection the peer closes.
func (c *Conn) failureLocked() error {
	if c.RX.FinRcvd && c.Core.Err == core.ErrReset {
		return nil
	}
	return c.Core.Err
}

// watchStep is how often the watch looks at the counters, or 0.
func watchStep(cfg Config) time.Duration {
	step := cfg.KeepAlive
	if b := cfg.PeerTimeout / 5; b > 0 && (step <= 0 || b < step) {
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
	if ctx := c.EP.ID.Context(); ctx != nil {
		dev = ctx.Name()
	}
	path := connface.PathOf(c.Prov, c.EP.QP)
	qp := c.EP.QP
	if debuglog.On(debuglog.Dial, slog.LevelInfo) {
		debuglog.Log("dial", slog.LevelInfo, "connection established", "provider", c.Prov,
			"device", dev, "path", path, "local", connface.AddrString(c.LocalAddr()), "peer", connface.AddrString(c.RemoteAddr()))
	}
	if c.Prov == soft.Name && debuglog.On(debuglog.Shm, slog.LevelInfo) {
		if path == "soft-shm" {
			debuglog.Log("shm", slog.LevelInfo, "shared memory in use", "peer", connface.AddrString(c.RemoteAddr()))
		} else {
			debuglog.Log("shm", slog.LevelInfo, "shared memory not used", "peer", connface.AddrString(c.RemoteAddr()), "reason", shmReason(c.EP.ID.LocalAddr(), c.EP.ID.RemoteAddr(), qp))
		}
	}
}

// logFailure logs a connection's failure and its cause (with mu held).
func (c *Conn) logFailure(err error) {
	if c.failureLocked() == nil {
		return // the peer closed
	}
	if debuglog.On(debuglog.Conn, slog.LevelWarn) {
		debuglog.Log("conn", slog.LevelWarn, "connection failed", "provider", c.Prov,
			"local", connface.AddrString(c.LocalAddr()), "peer", connface.AddrString(c.RemoteAddr()), "err", err.Error())
	}
}

// logGrowth logs a ring or send buffer moving to a larger one.
func (c growing) logGrowth(what string, from, to int) {
	if debuglog.On(debuglog.Ring, slog.LevelInfo) {
		debuglog.Log("ring", slog.LevelInfo, what+" grew", "peer", connface.AddrString(c.RemoteAddr()), "from", from, "to", to)
	}
}

func (c *Conn) PeerTakesRDMACM() bool { return c.peerRDMACM }

// postRecvs posts n receive WRs.
func (c receiver) postRecvs(n int) error {
	for n > 0 {
		k := min(n, recvBatch)
		if err := c.EP.QP.PostRecv(recvWRs[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// ReleaseVerbs destroys the connection's verbs objects once no post or
// poll is in flight; none is started afterwards.
func (c *Conn) ReleaseVerbs() {
	c.Core.Mu.Lock()
	c.Core.Torn = true
	// A post in flight, or a poll (the keepalive's), must finish before
	// the QP and CQ go; a registration, before the protection domain.
	for c.SQ.Submitting || c.Core.Poll.Held || c.registering > 0 {
		c.Core.Mu.Unlock()
		runtime.Gosched()
		c.Core.Mu.Lock()
	}
	c.Core.Mu.Unlock()
	held := c.regs().releaseZeroCopy() // zerocopy.go: before the protection domain goes
	c.endpoint.release(&c.EP, c.Core.Poll.Unacked)
	c.Core.Poll.Unacked = 0
	for _, b := range held {
		b.release()
	}
}
