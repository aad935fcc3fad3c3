//go:build linux

package soft

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring layout: one header page of control words, each on its own cache
// line, then the data area (a power of two). The producer owns tail and
// wclosed, the consumer head; rwait is set by a consumer about to sleep and
// cleared by whichever side wakes it, wwait likewise for a producer waiting
// for space. Positions are byte counts since the start, never wrapped.
//
// The data area holds records, 8-byte aligned, never wrapped around the
// end: an 8-byte header (kind uint32, length uint32) then
//
//	recData   length stream bytes (padded to 8)
//	recPad    length bytes to skip: the rest of the data area
//
// The producer publishes tail only at record boundaries. Everything read
// from the ring or the header page is checked: the peer can write to them.
// Only stream bytes ever enter a ring: payloads are copied in by the
// sender and out by the receiver, so no other memory of either process is
// shared.
const (
	shmHdrPage = 4096
	shmMagic   = 0x33_4d_48_53_54_46_4f_53 // "SOFTSHM3": one eventfd per side
	offMagic   = 0
	offTail    = 64
	offWClosed = 72
	offHead    = 128
	offRWait   = 192
	offWWait   = 256

	recData = 1
	recPad  = 3
	recHdr  = 8

	// shmSetupTimeout bounds the ring exchange on the unix socket.
	shmSetupTimeout = 2 * time.Second
	shmAckEvery     = 4
)

var errShmSetup = errors.New("soft: shared-memory setup failed")

func au64(b []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[off])) }
func au32(b []byte, off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&b[off])) }

// bootID identifies this boot of this host: two processes with the same
// boot ID share a kernel.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	s := string(bytes.TrimSpace(b))
	if len(s) != bootIDLen {
		return ""
	}
	return s
})

// shmRing is a view of one ring mapping.
type shmRing struct {
	mem     []byte
	data    []byte
	mask    uint64
	tail    *atomic.Uint64
	head    *atomic.Uint64
	wclosed *atomic.Uint32
	rwait   *atomic.Uint32
	wwait   *atomic.Uint32
}

func viewRing(mem []byte) shmRing {
	return shmRing{mem: mem, data: mem[shmHdrPage:], mask: uint64(len(mem) - shmHdrPage - 1),
		tail: au64(mem, offTail), head: au64(mem, offHead), wclosed: au32(mem, offWClosed),
		rwait: au32(mem, offRWait), wwait: au32(mem, offWWait)}
}

// shmLocal is what one side creates and passes to its peer: the ring it
// reads (the peer writes it) and the eventfd it waits on, which the peer
// signals both when it put data in our ring and when it freed space in its
// own. One eventfd per side, not one per condition: a connection holds
// three descriptors (its own eventfd, the peer's, the handshake's TCP
// connection), and the ring's memfd is closed once mapped.
type shmLocal struct {
	ring   []byte
	ringFD int
	ev     int
}

// newShmLocal creates a ring of size data bytes (a power of two).
func newShmLocal(size int) (*shmLocal, error) {
	l := &shmLocal{ringFD: -1, ev: -1}
	fail := func(err error) (*shmLocal, error) { l.free(); return nil, err }
	fd, err := unix.MemfdCreate("rdma-soft-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fail(err)
	}
	l.ringFD = fd
	// A memfd's inode is created mode 0777: whoever holds a descriptor of
	// it could reopen it through /proc/PID/fd whatever the descriptor's
	// own mode. Only this user's processes may.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail(err)
	}
	if err := unix.Ftruncate(fd, int64(shmHdrPage+size)); err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail(err)
	}
	if l.ring, err = unix.Mmap(fd, 0, shmHdrPage+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail(err)
	}
	au64(l.ring, offMagic).Store(shmMagic)
	if l.ev, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail(err)
	}
	return l, nil
}

func (l *shmLocal) free() {
	if l == nil {
		return
	}
	if l.ring != nil {
		_ = unix.Munmap(l.ring)
		l.ring = nil
	}
	for _, fd := range []*int{&l.ringFD, &l.ev} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// shmPeer is what the peer passed: the ring we write and its eventfd.
type shmPeer struct {
	ring []byte
	ev   int
}

func (p *shmPeer) free() {
	if p == nil {
		return
	}
	if p.ring != nil {
		_ = unix.Munmap(p.ring)
		p.ring = nil
	}
	if p.ev >= 0 {
		unix.Close(p.ev)
		p.ev = -1
	}
}

func sendSetup(uc *net.UnixConn, l *shmLocal) error {
	var b [shmSetupLen]byte
	marshalShmSetup(&b, uint32(len(l.ring)-shmHdrPage))
	_, _, err := uc.WriteMsgUnix(b[:], unix.UnixRights(l.ringFD, l.ev), nil)
	return err
}

// recvFDs reads one message of exactly len(b) bytes carrying exactly nfd
// descriptors, within the connection's deadline. On error no descriptor
// stays open.
func recvFDs(uc *net.UnixConn, b []byte, nfd int) ([]int, error) {
	buf := make([]byte, len(b)+1)
	oob := make([]byte, unix.CmsgSpace(4*(nfd+4)))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if err == nil && (n != len(b) || len(fds) != nfd || flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0) {
		err = errShmSetup
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	copy(b, buf)
	return fds, nil
}

// isEventfd reports whether fd is an eventfd.
func isEventfd(fd int) bool {
	s, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && s == "anon_inode:[eventfd]"
}

// mapRing maps a ring memfd the peer passed, of size bytes (checked against
// our limit already), after checking that it cannot shrink under us (which
// would turn our accesses into SIGBUS) and that no other user can open it.
func mapRing(fd int, size int) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, errShmSetup
	}
	// Only our user may reopen it (what we write there is for the peer).
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o077 != 0 ||
		st.Size < int64(size) {
		return nil, errShmSetup
	}
	// Not populated: pages are committed as the ring is first written, so
	// a connection that carries little costs little (measured: no
	// difference in a 64 KiB stream against MAP_POPULATE).
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// sendTokenSetup sends the token of a version 3 offer and our ring setup
// in one message.
func sendTokenSetup(uc *net.UnixConn, token *[16]byte, l *shmLocal) error {
	var b [16 + shmSetupLen]byte
	copy(b[:], token[:])
	marshalShmSetup((*[shmSetupLen]byte)(b[16:]), uint32(len(l.ring)-shmHdrPage))
	_, _, err := uc.WriteMsgUnix(b[:], unix.UnixRights(l.ringFD, l.ev), nil)
	return err
}

// recvSetup receives the peer's ring setup; limit is the largest ring data
// size we map.
func recvSetup(uc *net.UnixConn, limit int) (*shmPeer, error) {
	var b [shmSetupLen]byte
	fds, err := recvFDs(uc, b[:], 2)
	if err != nil {
		return nil, err
	}
	return peerSetup(b[:], fds, limit)
}

// peerSetup checks and maps the ring setup b that came with fds (a ring
// memfd, an eventfd); limit is the largest ring data size we map. The
// memfd is closed either way, the eventfd kept only on success.
func peerSetup(b []byte, fds []int, limit int) (*shmPeer, error) {
	p := &shmPeer{ev: fds[1]}
	defer unix.Close(fds[0])
	size, err := parseShmSetup(b, uint32(min(limit, shmRingMax)))
	if err != nil || !isEventfd(p.ev) {
		p.free()
		return nil, errShmSetup
	}
	if p.ring, err = mapRing(fds[0], shmHdrPage+int(size)); err != nil {
		p.free()
		return nil, errShmSetup
	}
	if au64(p.ring, offMagic).Load() != shmMagic {
		p.free()
		return nil, errShmSetup
	}
	return p, nil
}

// shmEligible: shared memory is on and the address is this host's.
func shmEligible(ip net.IP) bool {
	return shmOn.Load() && bootID() != "" && ip != nil && localIP(ip)
}

// shmSocketName is the abstract unix socket on which the active side of
// the TCP connection active->passive waits for the passive side. Both
// derive it from the connection's addresses as their kernels report them
// (the 4-tuple is unique on the host while the connection lives), so that
// no name is ever taken from a peer's message, and only names of this
// form can ever be dialled.
func shmSocketName(active, passive *net.TCPAddr) string {
	norm := func(a *net.TCPAddr) string {
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()).String()
	}
	return "@rdma-soft/" + norm(active) + "/" + norm(passive)
}

// shmUID is the uid a peer must run as to share memory with us: our
// effective uid (tests change it to play another user).
var shmUID atomic.Uint32

func init() { shmUID.Store(uint32(os.Geteuid())) }

// samePrincipal reports whether the process at the other end of uc runs
// as our effective uid (SO_PEERCRED: the connecting process's credentials
// for a listener, the listening process's for a dialler).
func samePrincipal(uc *net.UnixConn) bool {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Uid == shmUID.Load()
}

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
// rings once the connection has carried SetSharedMemorySwitch's bytes
// (shm_switch_linux.go).
func (o *shmOffer) switching(tr *tcpTransport) transport {
	o.done = true
	return newSwitchActive(tr, o, shmAfter.Load())
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

// shmTransport carries frames through two shared rings (transport.go).
//
// Both of its waits, the reader's for data and the writer's for space,
// sleep on the one eventfd of ours, which the peer signals for either (see
// sleep). Read deadlines are the transport's own (a timer that signals the
// eventfd), so that one set for the reader never cuts a writer's wait
// short.
type shmTransport struct {
	tcp  *net.TCPConn // liveness: the peer's death closes it
	rx   shmRing      // we consume
	tx   shmRing      // we produce
	size uint64

	ev     *os.File // ours: we sleep on it
	evRC   syscall.RawConn
	myEv   int // its descriptor, valid until free
	peerEv int // the peer's: we signal it

	// The read deadline (UnixNano, 0: none), and the timer that wakes a
	// reader when it passes (made on first use).
	rdl     atomic.Int64
	rdlMu   sync.Mutex
	rdlTime *time.Timer

	// Read side (one goroutine at a time).
	rhead   uint64
	recKind uint32
	recSrc  []byte
	recEnd  uint64
	hpart   [hdrLen]byte
	hn      int
	onIdle  func(boundary bool) bool
	rBusy   busySpin
	intr    atomic.Bool
	rArm    bool

	// Write side (one goroutine at a time).
	wpos   uint64 // our tail, including records not yet published
	whead  uint64 // the consumer's head as last seen
	open   bool   // a recData record is open at recAt
	recAt  uint64
	recN   uint64
	wArm   bool
	wSeen  atomic.Uint64 // whead when the writer went to sleep, for the reader's look
	txCopy ringCopier

	// Who sleeps on the eventfd (sleep).
	sleepMu  sync.Mutex
	parked   bool
	want     [2]atomic.Bool
	poke     [2]chan struct{}
	sleepFns [2]func(fd uintptr) bool

	// Lifecycle.
	users     atomic.Int64
	closed    atomic.Bool
	gone      atomic.Bool
	release   sync.Once
	watchOnce sync.Once
	watchFn   func()
	watchDone chan struct{}
}

const shmClosing = 1 << 40

var one = [8]byte{1}

// schedYield gives up the CPU. A raw system call: through unix.Syscall the
// runtime marks the P as in a system call, and a yield that lets the peer
// (or anything else) run for more than 20 us then has sysmon retake the P,
// hand it to another thread and keep waking every 20 us itself. Measured in
// a 64 KiB rdmaperf stream on a loaded 2-CPU host: nanosleep calls 5,000 ->
// 750 and context switches 29,000 -> 21,000 per 100,000 messages.
func schedYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

func signalFD(fd int) { _, _ = unix.Write(fd, one[:]) }

func newShmTransport(c *net.TCPConn, l *shmLocal, p *shmPeer) (*shmTransport, error) {
	t := &shmTransport{tcp: c, rx: viewRing(l.ring), tx: viewRing(p.ring),
		peerEv: p.ev, watchDone: make(chan struct{})}
	t.size = uint64(len(t.tx.data))
	t.myEv = l.ev
	t.ev = os.NewFile(uintptr(l.ev), "eventfd")
	unix.Close(l.ringFD)
	l.ring, l.ringFD, l.ev = nil, -1, -1
	p.ring, p.ev = nil, -1
	var err error
	t.evRC, err = t.ev.SyscallConn()
	t.sleepFns = [2]func(uintptr) bool{t.doWait, t.doWaitSpace}
	t.poke = [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	t.watchFn = t.startWatch
	if err != nil {
		t.close()
		return nil, errShmSetup
	}
	shmUsed.Add(1)
	return t, nil
}

func (t *shmTransport) enter() bool {
	if t.users.Add(1) >= shmClosing {
		t.exit()
		return false
	}
	return true
}

func (t *shmTransport) exit() {
	if t.users.Add(-1) == shmClosing {
		t.release.Do(t.free)
	}
}

func (t *shmTransport) free() {
	_ = unix.Munmap(t.rx.mem)
	_ = unix.Munmap(t.tx.mem)
	t.ev.Close()
	unix.Close(t.peerEv)
}

func (t *shmTransport) startWatch() { go t.watch() }

// watch reads the handshake's TCP connection, on which nothing more comes:
// its end means the peer is gone (or we closed).
func (t *shmTransport) watch() {
	defer close(t.watchDone)
	var b [1]byte
	_, _ = t.tcp.Read(b[:])
	t.gone.Store(true)
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
}

func (t *shmTransport) close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.tcp.Close()
	t.rdlMu.Lock()
	if t.rdlTime != nil {
		t.rdlTime.Stop()
	}
	t.rdlMu.Unlock()
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
	t.watchOnce.Do(func() { close(t.watchDone) })
	<-t.watchDone
	if t.users.Add(shmClosing) == shmClosing {
		t.release.Do(t.free)
	}
	return nil
}

func (t *shmTransport) setIdle(f func(bool) bool) { t.onIdle = f }

func (t *shmTransport) interrupt() {
	t.intr.Store(true)
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
}

// setReadDeadline bounds the reader's waits from now on and wakes a
// reader asleep when it passes.
func (t *shmTransport) setReadDeadline(d time.Time) error {
	t.rdlMu.Lock()
	defer t.rdlMu.Unlock()
	if d.IsZero() {
		t.rdl.Store(0)
		if t.rdlTime != nil {
			t.rdlTime.Stop()
		}
		return nil
	}
	t.rdl.Store(max(d.UnixNano(), 1))
	if t.closed.Load() {
		return nil
	}
	if t.rdlTime == nil {
		t.rdlTime = time.AfterFunc(time.Until(d), t.deadlinePassed)
	} else {
		t.rdlTime.Reset(time.Until(d))
	}
	return nil
}

func (t *shmTransport) deadlinePassed() {
	if t.enter() {
		signalFD(t.myEv)
		t.exit()
	}
}

// readExpired reports whether the read deadline has passed.
func (t *shmTransport) readExpired() bool {
	d := t.rdl.Load()
	return d != 0 && time.Now().UnixNano() >= d
}

// The two waiters on our eventfd.
const (
	sleepReader = 0
	sleepWriter = 1
)

// readable and writable are what wakes the reader and the writer, read
// from atomics only, so that either waiter can look on the other's behalf.
func (t *shmTransport) readable() bool {
	return t.rx.tail.Load() != t.rx.head.Load() || t.rx.wclosed.Load() != 0 || t.gone.Load() ||
		t.closed.Load() || t.intr.Load() || t.readExpired()
}

func (t *shmTransport) writable() bool {
	return t.tx.head.Load() != t.wSeen.Load() || t.gone.Load() || t.closed.Load()
}

func (t *shmTransport) ready(who int) bool {
	if who == sleepReader {
		return t.readable()
	}
	return t.writable()
}

// sleep waits for a signal on our eventfd on behalf of who (sleepReader or
// sleepWriter), whose condition was just found false; the caller looks at
// it again afterwards. One waiter at a time parks on the poller; the other,
// if it comes meanwhile, registers in want and waits on its poke channel,
// and the parked one hands every wake-up on to it. Nothing is missed: the
// parked one, before it parks, looks at a registered waiter's condition as
// well as its own, and a waiter that registers later looks at its own
// after registering (a signal always follows what it announces).
func (t *shmTransport) sleep(who int) error {
	other := 1 - who
	t.sleepMu.Lock()
	if t.parked {
		t.want[who].Store(true)
		t.sleepMu.Unlock()
		if t.ready(who) {
			t.sleepMu.Lock()
			if t.want[who].Load() {
				t.want[who].Store(false)
				t.sleepMu.Unlock()
				return nil
			}
			t.sleepMu.Unlock() // poked meanwhile: take the token below
		}
		<-t.poke[who]
		return nil
	}
	t.parked = true
	t.sleepMu.Unlock()
	if who == sleepReader {
		t.rArm = true
	} else {
		t.wArm = true
	}
	err := t.evRC.Read(t.sleepFns[who])
	t.sleepMu.Lock()
	t.parked = false
	if t.want[other].Load() {
		t.want[other].Store(false)
		t.poke[other] <- struct{}{}
	}
	t.sleepMu.Unlock()
	return err
}

// doWait and doWaitSpace are RawConn.Read callbacks that park once on the
// poller. The eventfd's counter is never read: every write to an eventfd is
// a new edge for the (edge-triggered) poller, so reading it back would only
// cost a system call per wake-up. RawConn.Read forgets a readiness that
// came before it started, so the first call looks again at what a signal
// would announce (published before signalling), for the caller and for a
// waiter registered behind it, and a signal sent after that look wakes the
// wait.
func (t *shmTransport) doWait(uintptr) bool {
	if t.rArm {
		t.rArm = false
		return t.rx.tail.Load() != t.rhead || t.readable() ||
			(t.want[sleepWriter].Load() && t.writable())
	}
	return true
}

func (t *shmTransport) doWaitSpace(uintptr) bool {
	if t.wArm {
		t.wArm = false
		return t.tx.head.Load() != t.whead || t.writable() ||
			(t.want[sleepReader].Load() && t.readable())
	}
	return true
}

// ---- read side ----

func (t *shmTransport) readHeader(h *[hdrLen]byte) error {
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	t.watchOnce.Do(t.watchFn)
	for t.hn < hdrLen {
		if err := t.next(t.hn == 0); err != nil {
			if err == io.EOF && t.hn > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		t.hn += t.take(t.hpart[t.hn:])
	}
	*h = t.hpart
	t.hn = 0
	return nil
}

// readPayload fills dst, in the region fenced by g (nil: none). The fence
// is held only while a record's bytes, already in the ring, are copied;
// once it is closed the rest of dst is skipped and the read returns
// errFenced.
func (t *shmTransport) readPayload(dst []byte, g *gate) error {
	if len(dst) == 0 {
		return nil
	}
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	for len(dst) > 0 {
		if err := t.next(false); err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if !g.enter() {
			if err := t.discard(len(dst)); err != nil {
				return err
			}
			return errFenced
		}
		n := t.take(dst)
		g.exit()
		dst = dst[n:]
	}
	return nil
}

func (t *shmTransport) discard(n int) error {
	if n == 0 {
		return nil
	}
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	for n > 0 {
		if err := t.next(false); err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		k := min(n, len(t.recSrc))
		t.recSrc = t.recSrc[k:]
		n -= k
		t.done()
	}
	return nil
}

// take copies from the current record into dst.
func (t *shmTransport) take(dst []byte) int {
	n := copy(dst, t.recSrc)
	t.recSrc = t.recSrc[n:]
	t.done()
	return n
}

// done releases a fully read recData record's ring space.
func (t *shmTransport) done() {
	if len(t.recSrc) == 0 && t.recKind == recData {
		t.recKind = 0
		t.consume(t.recEnd)
	}
}

// consume moves the ring's head to h and wakes a producer waiting for space.
func (t *shmTransport) consume(h uint64) {
	t.rhead = h
	t.rx.head.Store(h)
	if t.rx.wwait.Load() != 0 && t.rx.wwait.CompareAndSwap(1, 0) {
		signalFD(t.peerEv)
	}
}

// next makes a record with unread stream bytes current, waiting for one.
// boundary: the read is between frames (interruptible).
func (t *shmTransport) next(boundary bool) error {
	stage := 0
	for len(t.recSrc) == 0 {
		t.recKind = 0
		avail := t.rx.tail.Load() - t.rhead
		if avail == 0 {
			if err := t.wait(boundary, &stage); err != nil {
				return err
			}
			continue
		}
		if avail > t.size || avail%8 != 0 {
			return errProtocol
		}
		pos := t.rhead & t.rx.mask
		room := t.size - pos
		w := binary.LittleEndian.Uint64(t.rx.data[pos:])
		kind, n := uint32(w), w>>32
		switch kind {
		case recData:
			tot := recHdr + (n+7)&^7
			if n == 0 || tot > avail || tot > room {
				return errProtocol
			}
			t.recKind = recData
			t.recSrc = t.rx.data[pos+recHdr : pos+recHdr+n : pos+recHdr+n]
			t.recEnd = t.rhead + tot
		case recPad:
			if n != room-recHdr || room > avail {
				return errProtocol
			}
			t.consume(t.rhead + room)
		default:
			return errProtocol
		}
	}
	return nil
}

// wait waits for the ring to become non-empty: first the idle hook, then a
// bounded spin, then sleep on the eventfd.
func (t *shmTransport) wait(boundary bool, stage *int) error {
	if t.closed.Load() {
		return net.ErrClosed
	}
	if t.rx.wclosed.Load() != 0 && t.rx.tail.Load() == t.rhead {
		return io.EOF
	}
	if t.gone.Load() && t.rx.tail.Load() == t.rhead {
		return io.ErrUnexpectedEOF
	}
	if boundary && t.intr.Swap(false) {
		return errInterrupted
	}
	if t.readExpired() {
		return os.ErrDeadlineExceeded
	}
	switch *stage {
	case 0:
		*stage = 1
		if t.onIdle != nil && t.onIdle(boundary) && boundary {
			return errInterrupted
		}
		return nil
	case 1:
		*stage = 2
		if spin := shmSpin.Load(); spin > 0 {
			start := monotime()
			end := start + spin
			busy := t.rBusy.budget(spin)
			for i := 1; ; i++ {
				if t.rx.tail.Load() != t.rhead {
					if busy > 0 {
						t.rBusy.caught(monotime()-start < busy)
					}
					return nil
				}
				if i%64 == 0 {
					now := monotime()
					if t.intr.Load() || t.closed.Load() || now > end {
						if busy > 0 {
							t.rBusy.caught(false)
						}
						return nil
					}
					// Past the busy phase, give the CPU to whatever else
					// is runnable (the peer, on a busy host) while we
					// wait: a pure busy loop took CPU time the peer
					// needed to answer.
					if now-start >= busy {
						schedYield()
					}
				}
			}
		}
	}
	t.rx.rwait.Store(1)
	if t.rx.tail.Load() != t.rhead || t.rx.wclosed.Load() != 0 || t.gone.Load() || t.closed.Load() || (boundary && t.intr.Load()) {
		t.rx.rwait.Store(0)
		return nil
	}
	err := t.sleep(sleepReader)
	t.rx.rwait.Store(0)
	return err
}

// ---- write side ----

// room reserves need contiguous bytes at wpos, padding to the end of the
// ring if they do not fit there. false: not enough space now.
func (t *shmTransport) reserve(need uint64) (bool, error) {
	for {
		pos := t.wpos & t.tx.mask
		end := t.size - pos
		free := t.size - (t.wpos - t.whead)
		if end >= need && free >= need {
			return true, nil
		}
		if end < need && free >= end {
			binary.LittleEndian.PutUint64(t.tx.data[pos:], uint64(recPad)|(end-recHdr)<<32)
			t.wpos += end
			continue
		}
		if ok, err := t.refresh(); !ok || err != nil {
			return false, err
		}
	}
}

// closeRec ends the open recData record.
func (t *shmTransport) closeRec() {
	if !t.open {
		return
	}
	t.open = false
	binary.LittleEndian.PutUint64(t.tx.data[t.recAt&t.tx.mask:], uint64(recData)|t.recN<<32)
	t.wpos = t.recAt + recHdr + (t.recN+7)&^7
}

// publish makes the closed records visible and wakes a sleeping consumer.
func (t *shmTransport) publish() {
	t.closeRec()
	t.tx.tail.Store(t.wpos)
	if t.tx.rwait.Load() != 0 && t.tx.rwait.CompareAndSwap(1, 0) {
		signalFD(t.peerEv)
	}
}

// refresh rereads the consumer's head; it reports whether space was freed.
func (t *shmTransport) refresh() (bool, error) {
	h := t.tx.head.Load()
	if h == t.whead {
		return false, nil
	}
	if h < t.whead || h > t.wpos || h%8 != 0 {
		return false, errProtocol
	}
	t.whead = h
	return true, nil
}

// appendData copies as much of b as fits into the open (or a new) recData
// record; 0 when the ring is full.
func (t *shmTransport) appendData(b []byte) (int, error) {
	for {
		if !t.open {
			ok, err := t.reserve(recHdr + 8)
			if !ok || err != nil {
				return 0, err
			}
			t.open, t.recAt, t.recN = true, t.wpos, 0
		}
		start := t.recAt + recHdr
		pos := start & t.tx.mask
		lim := min(t.size-pos, t.whead+t.size-start, t.size/4)
		if lim <= t.recN {
			if _, err := t.refresh(); err != nil {
				return 0, err
			}
			lim = min(t.size-pos, t.whead+t.size-start, t.size/4)
		}
		if lim > t.recN {
			k := t.txCopy.copy(t.tx.data[pos+t.recN:pos+lim], b)
			t.recN += uint64(k)
			return k, nil
		}
		// The record cannot grow: end it and try a new one (reserve then
		// pads at the ring's end, or finds no space).
		t.closeRec()
	}
}

// writev copies bufs into the ring; gates, if not nil, holds beside each
// buffer the fence of the region it lies in, held only while a piece of it
// is copied. Once one of those is closed nothing more is read from its
// buffer, and writev returns errFenced.
func (t *shmTransport) writev(bufs [][]byte, gates []*gate, wait bool) (int, error) {
	if !t.enter() {
		return 0, net.ErrClosed
	}
	defer t.exit()
	n := 0
	off := 0 // into bufs[i]; bufs itself is the caller's and stays as it is
	for i := 0; i < len(bufs); {
		if t.closed.Load() {
			return n, net.ErrClosed
		}
		if t.gone.Load() {
			return n, syscall.EPIPE
		}
		b := bufs[i][off:]
		if len(b) == 0 {
			i, off = i+1, 0
			continue
		}
		var g *gate
		if gates != nil {
			g = gates[i]
		}
		if !g.enter() {
			t.publish()
			return n, errFenced
		}
		k, err := t.appendData(b)
		g.exit()
		if err != nil {
			t.publish()
			return n, err
		}
		if k == 0 {
			t.publish()
			if !wait {
				return n, nil
			}
			if err := t.waitSpace(); err != nil {
				return n, err
			}
			continue
		}
		n += k
		off += k
	}
	t.publish()
	return n, nil
}

// waitSpace waits until the consumer frees ring space: a bounded spin
// first, like the reader's (in a stream the consumer frees space within
// it, and the writer then never shares the eventfd with a sleeping
// reader), then sleep.
func (t *shmTransport) waitSpace() error {
	if spin := shmSpin.Load(); spin > 0 {
		end := monotime() + spin
		for i := 1; ; i++ {
			if t.tx.head.Load() != t.whead {
				return nil
			}
			if i%64 == 0 {
				if t.closed.Load() || t.gone.Load() || monotime() > end {
					break
				}
				schedYield()
			}
		}
	}
	t.wSeen.Store(t.whead)
	for {
		t.tx.wwait.Store(1)
		if h := t.tx.head.Load(); h != t.whead {
			t.tx.wwait.Store(0)
			return nil
		}
		if t.closed.Load() {
			return net.ErrClosed
		}
		if t.gone.Load() {
			return syscall.EPIPE
		}
		if err := t.sleep(sleepWriter); err != nil {
			return err
		}
	}
}

func (t *shmTransport) closeWrite() error {
	if !t.enter() {
		return net.ErrClosed
	}
	defer t.exit()
	t.publish()
	t.tx.wclosed.Store(1)
	signalFD(t.peerEv)
	return nil
}

// ackEvery: ACKs through shared memory cost no system call unless the
// requester sleeps, and each one completes the requester's WRs (and frees
// its send buffer) sooner, so the responder acknowledges more often than
// over TCP.
func (t *shmTransport) ackEvery(def int) int { return max(1, min(def, shmAckEvery)) }
