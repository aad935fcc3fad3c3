package soft

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// Queue pairs without the connection manager (PD.CreateQP).
//
// A soft device is given an address with Bind, as a RoCE port has the IP
// addresses of its netdev: its GID (index 0) becomes that IP address
// (IPv4 as ::ffff:a.b.c.d, RoCE v2's form) and its port's LID the TCP port
// of the device's listener at that address. A program exchanges its QP's
// number, PSNs, LID and GID with its peer as it would for a device, and
// moves the QP to RTR with the peer's; the QP is then reachable, and
// reaches its peer, at (GID, LID, QP number).
//
// Of the two QPs the one whose (GID, LID, QP number) sorts lower dials the
// other's device at RTR; the other waits for that connection in its
// device's listener. The dialer sends a hello naming the QP it wants and
// itself; the listener answers only if that QP is in RTR or RTS, waits for
// a connection still, and expects exactly that peer: the GID, LID and QP
// number the program gave it at RTR, and a TCP connection from the GID's
// IP address. Anything else is closed unanswered: a hostile client learns
// nothing, not even whether the QP exists. A dialer whose peer is not
// ready yet (still in INIT, or its program slower) is refused the same way
// and dials again, with a growing pause, as long as its QP stays in RTR or
// RTS: as on a NIC, a request that finds no peer is retried, and WRs
// posted meanwhile complete with RETRY_EXC_ERR after the QP's retries
// (watchdog in engine.go). The frames that follow are the CM path's
// (engine.go) on that TCP connection; the PSNs are the program's.
//
// The hello and its answer are one fixed-size message each:
//
//	off size field
//	0   4    magic "SRDQ"
//	4   1    version (1)
//	5   1    type (1 hello, 2 accept)
//	6   2    reserved, zero
//	8   4    destination QP number (the QP asked for / the dialer's)
//	12  4    source QP number
//	16  2    source LID (the sender's device port)
//	18  2    reserved, zero
//	20  4    source send queue depth
//	24  4    source receive queue depth
//	28  16   source GID
const (
	qpHelloMagic   = "SRDQ"
	qpHelloVersion = 1
	qpHelloLen     = 44
	qpHello        = 1
	qpAccept       = 2
)

// Redial pauses of a dialing QP whose peer is not there yet.
const (
	redialMin = 5 * time.Millisecond
	redialMax = 500 * time.Millisecond
)

// qpHelloMsg is a decoded hello or accept.
type qpHelloMsg struct {
	typ      uint8
	dst, src uint32
	lid      uint16
	sqDepth  uint32
	rqDepth  uint32
	gid      verbs.GID
}

func (m *qpHelloMsg) marshal() []byte {
	b := make([]byte, qpHelloLen)
	copy(b, qpHelloMagic)
	b[4], b[5] = qpHelloVersion, m.typ
	binary.LittleEndian.PutUint32(b[8:], m.dst)
	binary.LittleEndian.PutUint32(b[12:], m.src)
	binary.LittleEndian.PutUint16(b[16:], m.lid)
	binary.LittleEndian.PutUint32(b[20:], m.sqDepth)
	binary.LittleEndian.PutUint32(b[24:], m.rqDepth)
	copy(b[28:], m.gid[:])
	return b
}

var errBadHello = errors.New("soft: malformed QP hello")

func parseQPHello(b []byte) (qpHelloMsg, error) {
	var m qpHelloMsg
	if len(b) != qpHelloLen || string(b[:4]) != qpHelloMagic || b[4] != qpHelloVersion ||
		b[6] != 0 || b[7] != 0 || b[18] != 0 || b[19] != 0 {
		return m, errBadHello
	}
	m.typ = b[5]
	m.dst = binary.LittleEndian.Uint32(b[8:])
	m.src = binary.LittleEndian.Uint32(b[12:])
	m.lid = binary.LittleEndian.Uint16(b[16:])
	m.sqDepth = binary.LittleEndian.Uint32(b[20:])
	m.rqDepth = binary.LittleEndian.Uint32(b[24:])
	copy(m.gid[:], b[28:])
	if (m.typ != qpHello && m.typ != qpAccept) || m.dst == 0 || m.dst > 0xffffff || m.src == 0 || m.src > 0xffffff ||
		m.lid == 0 || m.sqDepth == 0 || m.sqDepth > maxQPWR || m.rqDepth > maxQPWR {
		return m, errBadHello
	}
	return m, nil
}

// gidOf is the GID of an IP address: IPv4 mapped into IPv6, as RoCE v2.
func gidOf(ip netip.Addr) verbs.GID { return verbs.GID(ip.As16()) }

// ipOf is the IP address a GID stands for.
func ipOf(g verbs.GID) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// endpoint is a device's address and listener (Bind).
type endpoint struct {
	dev   *device
	addr  netip.AddrPort // with the listener's port
	ln    *net.TCPListener
	slots *admission // as a CM listener's (admission.go): per-host bounds, silent ones evicted, parking
	life  context.Context
	end   context.CancelFunc
	wg    sync.WaitGroup

	mu      sync.Mutex
	waiting map[uint32]waitingQP // QPs in RTR or RTS that wait for their peer's connection
}

type waitingQP struct {
	q    *qp
	link *qpLink
}

// Bind gives the opened soft device ctx an address, as a RoCE device has
// its netdev's: GID index 0 of port 1 becomes addr's IP address (an IPv4
// address as ::ffff:a.b.c.d), and the port's LID the TCP port of a
// listener the device opens at addr (port 0: a free one). QPs created with
// PD.CreateQP on the device are then reached at (GID, LID, QP number), and
// reach their peers the same way, with no connection manager. The
// listener closes with the device. A device is bound once; the connection
// manager's own device (a CM ID's Context) cannot be bound.
func Bind(ctx verbs.Context, addr netip.AddrPort) error {
	const op = "soft.Bind"
	d, ok := ctx.(*device)
	if !ok || d == nil {
		return verbs.Errorf(op, syscall.EINVAL, "not a soft device")
	}
	if d.shared {
		return verbs.Errorf(op, syscall.EINVAL, "the connection manager's device cannot be bound: open %s", DeviceName)
	}
	ip := addr.Addr().Unmap()
	if !ip.IsValid() || ip.IsUnspecified() {
		return verbs.Errorf(op, syscall.EINVAL, "%v: a device needs a specific IP address", addr)
	}
	d.epMu.Lock()
	defer d.epMu.Unlock()
	if d.closed.Load() {
		return verbs.ErrClosed
	}
	if d.ep != nil {
		return verbs.Errorf(op, syscall.EINVAL, "%s is already bound to %v", DeviceName, d.ep.addr)
	}
	// Go's TCP keepalive off, as on the CM's sockets (dialTCP).
	nl, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp",
		netip.AddrPortFrom(ip, addr.Port()).String())
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EADDRNOTAVAIL
		}
		return verbs.Errorf(op, errno, "%v", err)
	}
	ln := nl.(*net.TCPListener)
	life, end := context.WithCancel(context.Background())
	ep := &endpoint{dev: d, ln: ln, life: life, end: end, waiting: map[uint32]waitingQP{},
		addr: netip.AddrPortFrom(ip, uint16(ln.Addr().(*net.TCPAddr).Port))}
	hsTimeout := time.Duration(handshakeTimeout.Load())
	// A connection's hello is awaited once it has a waiting place, and
	// read in a handshake slot, as a CM listener's request is: one host's
	// connections, silent or not, cannot take the places of another's.
	// Whoever gives it the place is one of the endpoint's goroutines (the
	// accept loop, or a handshake that ends), so that unbind waits for it.
	ep.slots = newHelloAdmission(max(1, int(maxHandshakes.Load())), max(1, int(maxHandshakesPerHost.Load())),
		func(slot *hsSlot) {
			ep.wg.Add(1)
			go ep.handshake(slot, hsTimeout)
		})
	d.ep = ep
	ep.wg.Add(1)
	go ep.acceptLoop()
	return nil
}

// discardArrived reads, without waiting, what has arrived on tr, up to a
// hello's length.
func discardArrived(tr *tcpTransport) {
	var b [qpHelloLen]byte
	_ = tr.rc.Control(func(fd uintptr) {
		_, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_DONTWAIT)
	})
}

// qpHelloArrived reports, for the bytes b that have arrived on a
// connection to a device's listener (at least one), whether its wait for
// its hello is over: all of it is there. Fewer bytes keep it waiting, junk
// or not, as silence does (admission.go).
func qpHelloArrived(b []byte) bool { return len(b) >= qpHelloLen }

// endpoint returns the device's endpoint, nil before Bind.
func (d *device) endpoint() *endpoint {
	d.epMu.Lock()
	defer d.epMu.Unlock()
	return d.ep
}

// unbind closes the endpoint's listener and ends its handshakes.
func (d *device) unbind() {
	d.epMu.Lock()
	ep := d.ep
	d.ep = nil
	d.epMu.Unlock()
	if ep != nil {
		ep.end()
		ep.ln.Close()
		ep.wg.Wait()
	}
}

func (ep *endpoint) gid() verbs.GID { return gidOf(ep.addr.Addr()) }
func (ep *endpoint) lid() uint16    { return ep.addr.Port() }

func (ep *endpoint) acceptLoop() {
	defer ep.wg.Done()
	defer ep.slots.shut()
	for {
		c, err := ep.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-ep.life.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		ep.slots.arrive(c) // never waits: one host's connections must not hold up the others'
	}
}

// handshake waits for a hello (admission.go's rules, as a CM listener's
// handshake), reads it and, if it names a QP that waits for exactly this
// peer, answers and starts the QP's engine on the connection.
func (ep *endpoint) handshake(slot *hsSlot, hsTimeout time.Duration) {
	defer ep.wg.Done()
	defer ep.slots.release(slot)
	c := slot.c
	tr, err := newTCPTransport(c)
	if err != nil {
		c.Close()
		return
	}
	deadline := time.Now().Add(hsTimeout)
	// A connection that has waited silentAfter without its hello gives
	// its place up then to a parked one of another host, if there is one
	// that could take it; else it waits on, to the deadline.
	giveWay := time.Now().Add(ep.slots.silentAfter)
	_ = tr.setReadDeadline(giveWay)
	if deadline.Before(giveWay) {
		_ = tr.setReadDeadline(deadline)
	}
	_ = c.SetWriteDeadline(deadline)
	stop := context.AfterFunc(ep.life, func() { interruptHandshake(c, tr) })
	defer stop()
	err = awaitArrival(tr, qpHelloLen, qpHelloArrived)
	if errors.Is(err, os.ErrDeadlineExceeded) && giveWay.Before(deadline) {
		if ep.slots.giveWay(slot) {
			_ = tr.close()
			return
		}
		_ = tr.setReadDeadline(deadline)
		if ep.life.Err() != nil {
			_ = tr.close()
			return
		}
		err = awaitArrival(tr, qpHelloLen, qpHelloArrived)
	}
	// A slot once the hello is there; reading it then waits on nothing.
	if err != nil || !ep.slots.awaitSlot(ep.life, slot, deadline) {
		// What part of a hello came is read first, so that the close
		// is a plain one (unread bytes would make it a reset): the
		// client learns nothing from how it ends.
		discardArrived(tr)
		_ = tr.close()
		return
	}
	var b [qpHelloLen]byte
	if err := tr.readPayload(b[:], gateRef{}); err != nil {
		_ = tr.close()
		return
	}
	m, err := parseQPHello(b[:])
	remote, _ := netip.AddrFromSlice(c.RemoteAddr().(*net.TCPAddr).IP)
	var q *qp
	var l *qpLink
	if err == nil && m.typ == qpHello {
		q, l = ep.claim(&m, remote.Unmap())
	}
	if q == nil {
		_ = tr.close()
		return
	}
	defer l.wg.Done()
	ans := qpHelloMsg{typ: qpAccept, dst: m.src, src: q.num, lid: ep.lid(), gid: ep.gid(),
		sqDepth: uint32(q.cap.MaxSendWR), rqDepth: uint32(q.cap.MaxRecvWR)}
	if _, err := c.Write(ans.marshal()); err != nil {
		_ = tr.close()
		q.linkFailed(l)
		return
	}
	_ = tr.setReadDeadline(time.Time{})
	_ = c.SetWriteDeadline(time.Time{})
	q.attach(l, c, tr, &m)
}

// claim takes the QP a hello names out of the waiting table, if it waits
// for exactly the hello's sender, connecting from remote; the caller owns
// the claim (q.link.wg) until the QP is attached or has failed.
func (ep *endpoint) claim(m *qpHelloMsg, remote netip.Addr) (*qp, *qpLink) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	w := ep.waiting[m.dst]
	if w.q == nil {
		return nil, nil
	}
	l := w.link
	if l.peerQPN != m.src || l.peerLID != m.lid || l.peerGID != m.gid || ipOf(m.gid) != remote || l.life.Err() != nil {
		return nil, nil
	}
	delete(ep.waiting, m.dst)
	l.wg.Add(1)
	return w.q, l
}

// qpLink is how a QP from PD.CreateQP finds its peer: the peer's address
// as the program gave it at RTR, and the dial or the wait for it.
type qpLink struct {
	ep      *endpoint
	peerGID verbs.GID
	peerLID uint16
	peerQPN uint32
	tos     int
	dials   bool // this side dials (its address sorts lower)
	life    context.Context
	end     context.CancelFunc
	wg      sync.WaitGroup // the dialer, or the handshake that claimed the QP
}

// toRTR checks the address vector of an INIT->RTR Modify and prepares the
// link. Called with q.mu held.
func (q *qp) toRTR(attr *verbs.QPAttr) (*qpLink, error) {
	const op = "ibv_modify_qp"
	if q.retired {
		return nil, verbs.Errorf(op, syscall.EINVAL, "a soft QP that was connected is not connected again: create a new QP")
	}
	ep := q.pd.ctx.endpoint()
	if ep == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "%s has no address: give it one with soft.Bind before moving its QPs to RTR", DeviceName)
	}
	ah := &attr.AH
	if !ah.IsGlobal {
		return nil, verbs.Errorf(op, syscall.EINVAL, "a soft port is reached by GID: set AH.IsGlobal and AH.GRH.DGID")
	}
	if ah.GRH.SGIDIndex != 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "source GID index %d: %s has one GID", ah.GRH.SGIDIndex, DeviceName)
	}
	if ah.PortNum != 0 && ah.PortNum != 1 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "port %d: %s has port 1 only", ah.PortNum, DeviceName)
	}
	ip := ipOf(ah.GRH.DGID)
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return nil, verbs.Errorf(op, syscall.EINVAL, "destination GID %v is no unicast address", net.IP(ah.GRH.DGID[:]))
	}
	if ah.DLID == 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "destination LID 0: a soft port's LID is its device's TCP port, which the peer's QueryPort reports")
	}
	if attr.DestQPNum == 0 || attr.DestQPNum > 0xffffff {
		return nil, verbs.Errorf(op, syscall.EINVAL, "destination QP number %#x out of range", attr.DestQPNum)
	}
	if ah.GRH.TrafficClass < 0 || ah.GRH.TrafficClass > verbs.MaxTOS {
		return nil, verbs.Errorf(op, syscall.EINVAL, "traffic class %d out of range", ah.GRH.TrafficClass)
	}
	local := addrKey(ep.gid(), ep.lid(), q.num)
	peer := addrKey(ah.GRH.DGID, ah.DLID, attr.DestQPNum)
	cmp := bytes.Compare(local[:], peer[:])
	if cmp == 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "a soft QP cannot be connected to itself")
	}
	life, end := context.WithCancel(ep.life)
	return &qpLink{ep: ep, peerGID: ah.GRH.DGID, peerLID: ah.DLID, peerQPN: attr.DestQPNum,
		tos: ah.GRH.TrafficClass, dials: cmp < 0, life: life, end: end}, nil
}

// addrKey orders QPs: GID, then LID, then QP number.
func addrKey(g verbs.GID, lid uint16, qpn uint32) [22]byte {
	var k [22]byte
	copy(k[:], g[:])
	binary.BigEndian.PutUint16(k[16:], lid)
	binary.BigEndian.PutUint32(k[18:], qpn)
	return k
}

// startLink makes the QP reachable: it dials its peer or waits in its
// device's table. Called with q.mu held, once the QP is in RTR.
func (q *qp) startLink(l *qpLink) {
	q.link = l
	if l.dials {
		l.wg.Add(1)
		go q.dial(l)
		return
	}
	l.ep.mu.Lock()
	l.ep.waiting[q.num] = waitingQP{q, l}
	l.ep.mu.Unlock()
}

// stopLink ends the dial or the wait, and waits for a handshake that
// claimed the QP to finish. Called without q.mu.
func (q *qp) stopLink(l *qpLink) {
	if l == nil {
		return
	}
	l.end()
	l.ep.mu.Lock()
	if l.ep.waiting[q.num].link == l {
		delete(l.ep.waiting, q.num)
	}
	l.ep.mu.Unlock()
	l.wg.Wait()
}

// dial connects to the peer's device, again and again while the peer is
// not ready, until the QP is connected or leaves RTR and RTS.
func (q *qp) dial(l *qpLink) {
	defer l.wg.Done()
	pause := redialMin
	hsTimeout := time.Duration(handshakeTimeout.Load())
	local := &net.TCPAddr{IP: net.IP(l.ep.addr.Addr().AsSlice())}
	remote := &net.TCPAddr{IP: net.IP(ipOf(l.peerGID).AsSlice()), Port: int(l.peerLID)}
	for {
		if l.life.Err() != nil {
			return
		}
		if q.dialOnce(l, local, remote, time.Now().Add(hsTimeout)) {
			return
		}
		select {
		case <-l.life.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, redialMax)
	}
}

// dialOnce is one attempt: it reports true once the QP is connected (or
// will never be).
func (q *qp) dialOnce(l *qpLink, local, remote *net.TCPAddr, deadline time.Time) bool {
	c, err := dialTCP(l.life, local, remote, deadline, l.tos, l.tos != 0)
	if err != nil {
		return false
	}
	tr, err := newTCPTransport(c)
	if err != nil {
		c.Close()
		return false
	}
	stop := context.AfterFunc(l.life, func() { interruptHandshake(c, tr) })
	defer stop()
	setHandshakeDeadline(l.life, c, tr, deadline)
	q.mu.Lock()
	hello := qpHelloMsg{typ: qpHello, dst: l.peerQPN, src: q.num, lid: l.ep.lid(), gid: l.ep.gid(),
		sqDepth: uint32(q.cap.MaxSendWR), rqDepth: uint32(q.cap.MaxRecvWR)}
	q.mu.Unlock()
	var b [qpHelloLen]byte
	if _, err = c.Write(hello.marshal()); err == nil {
		err = tr.readPayload(b[:], gateRef{})
	}
	var m qpHelloMsg
	if err == nil {
		m, err = parseQPHello(b[:])
	}
	if err != nil || m.typ != qpAccept || m.dst != q.num || m.src != l.peerQPN || m.lid != l.peerLID || m.gid != l.peerGID {
		_ = tr.close()
		return false
	}
	_ = c.SetWriteDeadline(time.Time{})
	_ = tr.setReadDeadline(time.Time{})
	q.attach(l, c, tr, &m)
	return true
}

// attach starts the QP's engine on a connection to its peer, unless the
// QP has left RTR and RTS (or its link ended) meanwhile.
func (q *qp) attach(l *qpLink, c *net.TCPConn, tr *tcpTransport, m *qpHelloMsg) {
	q.mu.Lock()
	ok := !q.destroyed && q.link == l && l.life.Err() == nil && q.tr == nil &&
		(q.state == verbs.QPSRTR || q.state == verbs.QPSRTS)
	if ok {
		q.sock = c
		q.retired = true // its engine, once stopped, does not start again
	}
	q.mu.Unlock()
	if !ok {
		_ = tr.close()
		return
	}
	q.start(tr, &hsMsg{qpn: m.src, sqDepth: m.sqDepth, rqDepth: m.rqDepth}, nil)
	q.mu.Lock()
	q.kick() // what was posted while the connection was being made
	q.mu.Unlock()
	q.startReceiver(nil)
}

// linkFailed: the handshake that claimed the QP could not answer; the
// QP waits again, for the peer's next dial.
func (q *qp) linkFailed(l *qpLink) {
	l.ep.mu.Lock()
	if _, taken := l.ep.waiting[q.num]; !taken && l.life.Err() == nil {
		l.ep.waiting[q.num] = waitingQP{q, l}
	}
	l.ep.mu.Unlock()
}

// CreateQP is ibv_create_qp: an RC QP in RESET, which its owner moves to
// RTS with Modify (RCTransition) and connects to its peer by address at
// RTR (Bind).
func (p *pd) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	p.mu.Lock()
	dead := p.dead
	p.mu.Unlock()
	if dead {
		return nil, verbs.ErrClosed
	}
	q, err := newQP(p, attr)
	if err != nil {
		return nil, err
	}
	q.manual = true
	q.qpAccess = 0
	return q, nil
}
