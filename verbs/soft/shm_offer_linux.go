//go:build linux

package soft

import (
	"crypto/rand"
	"crypto/subtle"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The offer and the answer: the active side's REQ offers shared memory
// (shmOffer, listening on the connection's unix socket), the passive side
// answers by dialing it and presenting the REQ's token (shmAnswer,
// shmPrepared), and the rings change hands (shm_setup_linux.go) before the
// REP names the transport. shmExchange carries the result between the
// goroutine doing the exchange and the handshake waiting for it.

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// shmOffer is the active side's half: it listens on the connection's
// abstract unix socket for the passive side, and exchanges rings and
// eventfds there with the first process of our uid that presents the
// REQ's token.
type shmOffer struct {
	la, ra  *net.TCPAddr
	ln      *net.UnixListener // nil until listen
	token   [16]byte
	version uint8
	size    int // our ring's data size, as offered
	ext     []byte
	x       *shmExchange
	done    bool
}

type shmResult struct {
	local *shmLocal
	peer  *shmPeer
	err   error
}

func (r *shmResult) free() {
	r.local.free()
	r.peer.free()
}

// shmExchange hands the result of one side's ring exchange from the
// goroutine that runs it to the connection that takes it: waited for
// (version 3), handed to a function when it comes (version 4), or given
// up, in which case it is freed by whichever of the two sides is last.
type shmExchange struct {
	mu      sync.Mutex
	done    chan struct{} // closed once the result is in
	res     shmResult
	in      bool // res holds the result, not yet taken
	then    func(shmResult)
	dropped bool
	stop    func() // cuts a pending exchange short (nil: it ends by its deadline)
}

func newShmExchange() *shmExchange { return &shmExchange{done: make(chan struct{})} }

// deliver hands the exchange's result over (once).
func (x *shmExchange) deliver(r shmResult) {
	x.mu.Lock()
	if x.dropped {
		x.mu.Unlock()
		r.free()
		return
	}
	then := x.then
	x.then = nil
	if then == nil {
		x.res, x.in = r, true
	}
	close(x.done)
	x.mu.Unlock()
	if then != nil {
		then(r)
	}
}

// take waits for the result and takes it.
func (x *shmExchange) take() shmResult {
	<-x.done
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.res
	x.res, x.in = shmResult{}, false
	return r
}

// onDone hands the result to f: at once, in this goroutine, if it is in,
// or else in the goroutine that delivers it, when it comes.
func (x *shmExchange) onDone(f func(shmResult)) {
	x.mu.Lock()
	if x.in {
		r := x.res
		x.res, x.in = shmResult{}, false
		x.mu.Unlock()
		f(r)
		return
	}
	x.then = f
	x.mu.Unlock()
}

// setStop installs what cuts the exchange short; after drop, it runs at
// once.
func (x *shmExchange) setStop(stop func()) {
	x.mu.Lock()
	dropped := x.dropped
	x.stop = stop
	x.mu.Unlock()
	if dropped {
		stop()
	}
}

// drop gives the result up: it is freed now if it is in, or else by the
// exchange when it ends, which stop hastens.
func (x *shmExchange) drop() {
	if x == nil {
		return
	}
	x.mu.Lock()
	x.dropped, x.then = true, nil
	r, in := x.res, x.in
	x.res, x.in = shmResult{}, false
	stop := x.stop
	x.mu.Unlock()
	if in {
		r.free()
	}
	if stop != nil {
		stop()
	}
}

// newShmOffer offers shared memory on the TCP connection c (just dialled),
// when the peer may be on this host: version 4, set up off the
// connection's path (wire.go).
func newShmOffer(c *net.TCPConn, deadline time.Time) *shmOffer {
	return newShmOfferVersion(c, deadline, 4)
}

// newShmOfferVersion makes an offer of version 3 (the passive side answers
// it before the connection starts) or 4.
func newShmOfferVersion(c *net.TCPConn, deadline time.Time, version uint8) *shmOffer {
	la, _ := c.LocalAddr().(*net.TCPAddr)
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	if la == nil || ra == nil || !shmEligible(ra.IP) {
		return nil
	}
	o := &shmOffer{la: la, ra: ra, version: version, size: int(shmRingSize.Load()), x: newShmExchange()}
	if _, err := rand.Read(o.token[:]); err != nil {
		return nil
	}
	o.ext = (&shmOfferExt{version: version, bootID: bootID(), token: o.token, ringSize: uint32(o.size)}).marshal()
	if version == 4 {
		return o // listens when the connection asks for shared memory (switching)
	}
	if o.listen(earliest(deadline, time.Now().Add(shmSetupTimeout))) != nil {
		return nil
	}
	return o
}

// listen opens the offer's socket and serves it until deadline: in
// version 3 at once, in version 4 when the connection is to move to
// shared memory (switchTransport.start), just before it invites the peer.
func (o *shmOffer) listen(deadline time.Time) error {
	name := shmSocketName(o.la, o.ra)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return err
	}
	o.ln = ln
	o.x.setStop(func() { _ = ln.Close() })
	go o.serve(o.size, deadline)
	return nil
}

// serve creates our ring (of size data bytes) while the REQ travels, so
// that it is off the connect's path, then accepts the passive side's
// connection: it skips connections from another uid or without the token,
// sends our setup and receives the peer's.
//
// The listener is closed before the result is handed over: once finish or
// abort has it, no passive side can reach this offer any more.
func (o *shmOffer) serve(size int, deadline time.Time) {
	o.x.deliver(o.accept(size, deadline))
}

func (o *shmOffer) accept(size int, deadline time.Time) shmResult {
	_ = o.ln.SetDeadline(deadline)
	defer o.ln.Close()
	local, err := newShmLocal(size)
	if err != nil {
		return shmResult{err: err}
	}
	for {
		uc, err := o.ln.AcceptUnix()
		if err != nil {
			local.free()
			return shmResult{err: err}
		}
		if !samePrincipal(uc) {
			uc.Close()
			continue
		}
		_ = uc.SetDeadline(deadline)
		// The token and the peer's setup, in one message (version 3).
		var b [16 + shmSetupLen]byte
		fds, err := recvFDs(uc, b[:], 2)
		if err != nil {
			uc.Close()
			continue
		}
		if subtle.ConstantTimeCompare(b[:16], o.token[:]) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			uc.Close()
			continue
		}
		peer, err := peerSetup(b[16:], fds, len(local.ring)-shmHdrPage)
		if err == nil {
			local.joinDoorbell(peerPID(uc))
			if err = sendSetup(uc, local); err != nil {
				peer.free()
				peer = nil
			}
		}
		// The socket is done with: the rings and eventfds are all we keep.
		uc.Close()
		if err != nil {
			local.free()
			local = nil
		}
		return shmResult{local: local, peer: peer, err: err}
	}
}

// finish completes the offer once the REP picked shared memory (version
// 3: the exchange is waited for).
func (o *shmOffer) finish(c *net.TCPConn) (transport, error) {
	o.done = true
	r := o.x.take()
	if r.err != nil {
		return nil, r.err
	}
	return newShmTransport(c, r.local, r.peer)
}

// switching completes a version 4 offer once the REP picked
// transportShmSwitch: frames start on tr, and the transport moves to the
// rings once the connection has carried SetSharedMemorySwitch's bytes, or
// received SetSharedMemorySwitchFrames' frames (shm_switch_linux.go).
func (o *shmOffer) switching(tr *tcpTransport) transport {
	o.done = true
	return newSwitchActive(tr, o, currentSwitchRule())
}

// abort withdraws the offer (the REP picked TCP, or the connect failed).
func (o *shmOffer) abort() {
	if o == nil || o.done {
		return
	}
	o.done = true
	if o.ln == nil {
		return // never listened: nothing was made
	}
	o.ln.Close()
	r := o.x.take()
	r.free()
}

func (o *shmOffer) extension() []byte {
	if o == nil {
		return nil
	}
	return o.ext
}

// shmPrepared is the passive side's half, set up before the connect
// request is reported, so that Accept only has to pick it.
type shmPrepared struct {
	local *shmLocal
	peer  *shmPeer
	// Versions 3 and 4: the socket on which the active side's setup is
	// still to come (receive takes it: in version 3 once the REP is sent,
	// in version 4 at once), and the largest ring of its we map.
	uc    *net.UnixConn
	limit int
}

// takeOffer checks a REQ's shared-memory offer: it is there, well-formed,
// from this boot of this host, over a connection between two of its
// addresses, and names a ring no larger than we map. ok false: the
// connection uses TCP.
func takeOffer(req *hsMsg, c *net.TCPConn) (off shmOfferExt, la, ra *net.TCPAddr, ok bool) {
	if req.transports&transportShm == 0 {
		return off, nil, nil, false
	}
	la, _ = c.LocalAddr().(*net.TCPAddr)
	ra, _ = c.RemoteAddr().(*net.TCPAddr)
	if la == nil || ra == nil || !shmEligible(ra.IP) {
		return off, nil, nil, false
	}
	off, err := parseShmOffer(req.ext)
	if err != nil || off.bootID != bootID() {
		return off, nil, nil, false
	}
	if off.version >= 3 && int64(off.ringSize) > shmRingSize.Load() {
		return off, nil, nil, false // its ring would be larger than we map
	}
	return off, la, ra, true
}

// shmSwitchOffered reports whether req offers shared memory set up off the
// connection's path (version 4) that this side takes: the REP then picks
// transportShmSwitch, and shmAnswerSwitch runs the exchange.
func shmSwitchOffered(req *hsMsg, c *net.TCPConn) bool {
	off, _, _, ok := takeOffer(req, c)
	return ok && off.version == 4
}

// shmAnswerSwitch runs this side's whole exchange for a version 4 offer
// and hands the result to x (once the active side invited it: the
// switching transport runs it in a goroutine of its own).
func shmAnswerSwitch(req *hsMsg, c *net.TCPConn, deadline time.Time, x *shmExchange) {
	p := shmAnswer(req, c, deadline)
	if p == nil {
		x.deliver(shmResult{err: errShmSetup})
		return
	}
	x.deliver(p.receive())
}

// shmAnswer sets up shared memory for a REQ that offers it, when this side
// can: nil otherwise (the connection then uses TCP). It dials only the
// socket named after c's own addresses, and only a listener of our uid.
func shmAnswer(req *hsMsg, c *net.TCPConn, deadline time.Time) *shmPrepared {
	off, la, ra, ok := takeOffer(req, c)
	if !ok {
		return nil
	}
	limit := int(shmRingSize.Load())
	deadline = earliest(deadline, time.Now().Add(shmSetupTimeout))
	nd := net.Dialer{Deadline: deadline}
	nc, err := nd.Dial("unixpacket", shmSocketName(ra, la))
	if err != nil {
		return nil
	}
	uc := nc.(*net.UnixConn)
	if !samePrincipal(uc) {
		uc.Close()
		return nil
	}
	_ = uc.SetDeadline(deadline)
	p := &shmPrepared{}
	if off.version >= 3 {
		// Our ring as large as its: the largest it maps, and no larger
		// than ours (checked above). Token and setup go in one message;
		// its setup is received by start, after the REP: the REP and its
		// answer cross instead of following each other.
		if p.local, err = newShmLocal(int(off.ringSize)); err != nil {
			uc.Close()
			return nil
		}
		p.uc, p.limit = uc, limit
		p.local.joinDoorbell(peerPID(uc))
		if err := sendTokenSetup(uc, &off.token, p.local); err != nil {
			p.abort()
			return nil
		}
		return p
	}
	defer uc.Close() // the rings and eventfds are all we keep
	if _, err := uc.Write(off.token[:]); err != nil {
		return nil
	}
	// Version 2. Our ring is made while the active side answers the
	// token, at our size: the common case, both sides with the same ring
	// size.
	if p.local, err = newShmLocal(limit); err != nil {
		return nil
	}
	if p.peer, err = recvSetup(uc, limit); err != nil {
		p.abort()
		return nil
	}
	// Our ring no larger than the active side's, which is its limit.
	if size := len(p.peer.ring) - shmHdrPage; size < limit {
		p.local.free()
		if p.local, err = newShmLocal(size); err != nil {
			p.abort()
			return nil
		}
	}
	p.local.joinDoorbell(peerPID(uc))
	if err := sendSetup(uc, p.local); err != nil {
		p.abort()
		return nil
	}
	return p
}

func (p *shmPrepared) abort() {
	if p == nil {
		return
	}
	if p.uc != nil {
		p.uc.Close()
		p.uc = nil
	}
	p.local.free()
	p.peer.free()
}

// start makes the transport once the REP picking shared memory is sent:
// in version 3 it first receives the active side's setup (within the
// exchange's deadline). On failure everything is released.
func (p *shmPrepared) start(c *net.TCPConn) (transport, error) {
	r := p.receive()
	if r.err != nil {
		return nil, r.err
	}
	return newShmTransport(c, r.local, r.peer)
}

// receive completes the exchange: in versions 3 and 4 it receives the
// active side's setup (within the exchange's deadline). The result owns
// the rings and eventfds; on failure everything is released.
func (p *shmPrepared) receive() shmResult {
	if p.uc != nil {
		peer, err := recvSetup(p.uc, p.limit)
		p.uc.Close() // the rings and eventfds are all we keep
		p.uc = nil
		if err != nil {
			p.abort()
			return shmResult{err: err}
		}
		p.peer = peer
	}
	r := shmResult{local: p.local, peer: p.peer}
	p.local, p.peer = nil, nil
	return r
}
