package soft

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handshake admission on a soft listener.
//
// The listener accepts every TCP connection as it comes, and never stops
// accepting on account of one host: what the kernel's listen queue holds is
// in arrival order, so a pause made for one host would make every host
// behind it wait.
//
// An accepted connection then waits, holding nothing but a goroutine and
// its descriptor, until its whole request has arrived (at most the
// handshake timeout). At most maxWaiting connections wait so in all, and at
// most hostWaiting (a quarter of them) come from one remote host (an IPv6
// host counts as its /64), so that one host cannot take the places of the
// others. A connection whose request is there takes one of the listener's
// handshake slots, in which the request is read and set up without waiting
// on the peer. Slots bound that work in all (SetMaxHandshakes) and per
// remote host (SetMaxHandshakesPerHost).
//
// A newcomer for whom there is no waiting place is parked: it keeps its
// descriptor, and its wait for its request starts when a place frees up
// (the host with the fewest waiting connections gets it; of its parked
// connections, the oldest whose request is there, of the first peekScan,
// or else the oldest). When all maxWaiting places are taken, a newcomer of
// a host below its bound first frees one by closing the oldest connection,
// of any host, that has waited silentAfter without its request; and a
// connection that has waited silentAfter without its request gives its
// place up then (giveWay) if another host below its bound has a
// connection parked. A host's silent connections do not give way to its
// own newcomers (a client slow to write its requests, a burst of them, is
// not cut short by itself): they hold its places to the handshake timeout.
// At most maxParked connections are parked in all; beyond, the host with
// the most parked connections loses its newest one (the newcomer, if that
// host is its own, ties included).
//
// Nothing honest is refused: short of the parked bound, a connection whose
// request is there is never closed for another, and a client that dials
// thousands of connections at once from one host, a pool warming up, gets
// them all (up to hostWaiting plus maxParked at once), in turn, while
// another host's connection goes past them at once.
type admission struct {
	mu          sync.Mutex
	max         int // slots in all
	perHost     int // slots per host
	maxWaiting  int // waiting connections in all
	hostWaiting int // waiting connections per host
	maxParked   int // parked connections in all
	silentAfter time.Duration
	now         func() time.Time
	// run starts the wait for a connection's request, once it has a
	// waiting place; called without mu held, by whoever gave it the place.
	run func(*hsSlot)
	// peek reports whether a parked connection's request is all there
	// (peekRequest); called with mu held.
	peek func(*hsSlot) bool
	// request says of the bytes arrived on a connection (at least one)
	// whether its wait for its request is over (requestArrived for a CM
	// listener's, qpHelloArrived for a device's); requestMax bounds what
	// is looked at.
	request    func([]byte) bool
	requestMax int
	closed     bool // shut: whatever comes or is parked is closed

	n       int                        // slots held
	hosts   map[netip.Addr]*hostPlaces // the hosts that hold any place
	waiting []*hsSlot                  // waiting connections, in arrival order
	parked  []*hostPlaces              // the hosts with parked connections
	nParked int
	// freed, when somebody waits for a slot, is closed (and dropped) when
	// one is given back.
	freed chan struct{}
	// started collects, under mu, the connections given a waiting place
	// since the last unlock, which runs them.
	started []*hsSlot
	peekBuf []byte // peekRequest's
}

// hostPlaces is what one remote host holds in a listener's admission.
type hostPlaces struct {
	host    netip.Addr
	held    int       // slots
	waiting int       // waiting places
	parked  []*hsSlot // in arrival order
}

// silentAfter is how long a connection must have waited without its
// request before it gives its place up to another. A client that dials
// thousands of connections at once may take a good part of a second to
// write each its request.
const silentAfter = time.Second

// hsSlot is one accepted connection's place in its listener's admission.
type hsSlot struct {
	c     *net.TCPConn
	host  netip.Addr
	state uint8
	since time.Time // when it started waiting for its request
}

const (
	slotParked  = iota // accepted, its wait for its request not yet started
	slotWaiting        // no slot yet, its request not yet all there
	slotReady          // no slot yet, its request there
	slotHeld           // its request being read and set up
	slotFree           // done, or ended
)

// newAdmission bounds slots to maxSlots in all and perHost per host, and
// waiting connections to 16 per slot in all and a quarter of that per host;
// run starts the wait for a connection's request.
func newAdmission(maxSlots, perHost int, run func(*hsSlot)) *admission {
	w := 16 * maxSlots
	a := &admission{max: maxSlots, perHost: perHost, maxWaiting: w, hostWaiting: max(1, w/4), maxParked: 4 * w,
		silentAfter: silentAfter, now: time.Now, run: run, hosts: map[netip.Addr]*hostPlaces{},
		request: requestArrived, requestMax: hsHdrLen + maxHandshakeBody}
	a.peek = a.peekRequest
	return a
}

// newHelloAdmission is newAdmission for a device's listener (manual.go),
// whose request is a QP hello.
func newHelloAdmission(maxSlots, perHost int, run func(*hsSlot)) *admission {
	a := newAdmission(maxSlots, perHost, run)
	a.request, a.requestMax = qpHelloArrived, qpHelloLen
	return a
}

// unlock gives the waiting places that are free to parked connections,
// releases mu and starts the connections given a place.
func (a *admission) unlock() {
	if !a.closed {
		a.promote()
	}
	// Not those ended meanwhile.
	started := slices.DeleteFunc(a.started, func(e *hsSlot) bool { return e.state == slotFree })
	a.started = nil
	a.mu.Unlock()
	for _, e := range started {
		a.run(e)
	}
}

// arrive records c, just accepted, and returns its place: waiting (run is
// called for it), parked, or free (c was closed at once: the listener is
// shut, or its host has the most connections parked when too many are).
func (a *admission) arrive(c *net.TCPConn) *hsSlot { return a.admit(c, remoteHost(c)) }

// admit is arrive for a connection from host.
func (a *admission) admit(c *net.TCPConn, host netip.Addr) *hsSlot {
	a.mu.Lock()
	defer a.unlock()
	e := &hsSlot{c: c, host: host, state: slotFree}
	if a.closed {
		c.Close()
		return e
	}
	h := a.hosts[host]
	if h == nil {
		h = &hostPlaces{host: host}
		a.hosts[host] = h
	}
	if !a.room(h) {
		a.makeRoom(h)
		a.hosts[host] = h // again, if the one it ended was h's last
	}
	// In the queue of its host, behind any of that host's: the places
	// free go to parked connections (promote), this one's at once if its
	// host may have one and has none parked.
	e.state = slotParked
	if len(h.parked) == 0 {
		a.parked = append(a.parked, h)
	}
	h.parked = append(h.parked, e)
	a.nParked++
	a.promote()
	if e.state == slotParked {
		counters.parked.Add(1)
	}
	if a.nParked > a.maxParked {
		// The host with the most parked connections gives one up, its
		// newest: the newcomer's host on a tie.
		most := h
		for _, p := range a.parked {
			if len(p.parked) > len(most.parked) {
				most = p
			}
		}
		last := most.parked[len(most.parked)-1]
		counters.dropped.Add(1)
		a.free(last)
		last.c.Close()
	}
	return e
}

// room reports whether a connection of h may wait now. Called with mu held.
func (a *admission) room(h *hostPlaces) bool {
	return h.waiting < a.hostWaiting && len(a.waiting) < a.maxWaiting
}

// makeRoom ends the oldest waiting connection that has waited silentAfter
// without its request, of any host, for a newcomer of h below its bound
// when all places are taken. Called with mu held.
func (a *admission) makeRoom(h *hostPlaces) {
	if h.waiting >= a.hostWaiting {
		return // its host is at its bound: no place of another's would be its
	}
	now := a.now()
	i := slices.IndexFunc(a.waiting, func(w *hsSlot) bool {
		return w.state == slotWaiting && now.Sub(w.since) >= a.silentAfter
	})
	if i < 0 {
		return
	}
	old := a.waiting[i]
	counters.evicted.Add(1)
	a.free(old)
	old.c.Close() // its wait for the request then fails and returns
}

// startWaiting gives e a waiting place; unlock runs it. Called with mu held.
func (a *admission) startWaiting(e *hsSlot, h *hostPlaces) {
	e.state, e.since = slotWaiting, a.now()
	h.waiting++
	a.waiting = append(a.waiting, e)
	a.started = append(a.started, e)
}

// promote gives the waiting places that are free to parked connections:
// each to the host with the fewest waiting connections (below its bound),
// for its oldest parked connection whose request is there, of the first
// peekScan, or else its oldest. Called with mu held.
func (a *admission) promote() {
	for a.nParked > 0 && len(a.waiting) < a.maxWaiting {
		var best *hostPlaces
		for _, p := range a.parked {
			if p.waiting < a.hostWaiting && (best == nil || p.waiting < best.waiting) {
				best = p
			}
		}
		if best == nil {
			return // each host with parked connections is at its bound
		}
		// The oldest whose request is there, of the first peekScan; else
		// the oldest.
		i := max(0, slices.IndexFunc(best.parked[:min(len(best.parked), peekScan)], a.peek))
		e := best.parked[i]
		best.parked = slices.Delete(best.parked, i, i+1)
		a.nParked--
		if len(best.parked) == 0 {
			a.unpark(best)
		}
		a.startWaiting(e, best)
	}
}

// peekScan bounds how many of a host's parked connections are looked at,
// for one whose request is there, when a place frees up for one of them.
const peekScan = 64

// giveWay ends e, a waiting connection that has waited silentAfter without
// its request, if all places are taken and another host below its bound
// has a connection parked: true then, and e's place is free (the caller
// closes e's connection). Its own host's parked connections do not end it:
// they are that host's, as the silent one may be (a client slow to write
// its request), and wait for its places in turn.
func (a *admission) giveWay(e *hsSlot) bool {
	a.mu.Lock()
	defer a.unlock()
	if e.state != slotWaiting || len(a.parked) == 0 {
		return false
	}
	h := a.hosts[e.host]
	if !slices.ContainsFunc(a.parked, func(p *hostPlaces) bool { return p != h && p.waiting < a.hostWaiting }) {
		return false
	}
	counters.evicted.Add(1)
	a.free(e)
	return true
}

// peekRequest reports whether e's whole request is there (or cannot begin
// one: the read that follows then fails at once, or the connection's end),
// reading nothing. Called with mu held.
func (a *admission) peekRequest(e *hsSlot) bool {
	rc, err := e.c.SyscallConn()
	if err != nil {
		return false
	}
	if a.peekBuf == nil {
		a.peekBuf = make([]byte, a.requestMax)
	}
	there := false
	_ = rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), a.peekBuf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		there = err == nil && (n == 0 || a.request(a.peekBuf[:n]))
	})
	return there
}

// unpark drops h, without parked connections now, from the parked hosts.
// Called with mu held.
func (a *admission) unpark(h *hostPlaces) {
	if i := slices.Index(a.parked, h); i >= 0 {
		a.parked = slices.Delete(a.parked, i, i+1)
	}
}

// take gives e, whose request is there, a slot. ok is false when e has been
// ended; otherwise a nil wait means it has its slot, and a non-nil one is
// closed when a slot is given back.
func (a *admission) take(e *hsSlot) (ok bool, wait <-chan struct{}) {
	a.mu.Lock()
	defer a.unlock()
	if e.state != slotWaiting && e.state != slotReady {
		return false, nil
	}
	first := e.state == slotWaiting
	e.state = slotReady
	h := a.hosts[e.host]
	if a.n >= a.max || h.held >= a.perHost {
		if first {
			counters.slotWaits.Add(1)
		}
		if a.freed == nil {
			a.freed = make(chan struct{})
		}
		return true, a.freed
	}
	a.unwait(e, h)
	e.state = slotHeld
	h.held++
	a.n++
	return true, nil
}

// awaitSlot waits until e has a slot: false if it was ended, the deadline
// passed or life ended first.
func (a *admission) awaitSlot(life context.Context, e *hsSlot, deadline time.Time) bool {
	var w waiter
	defer w.stop()
	for {
		ok, wait := a.take(e)
		if !ok || wait == nil {
			return ok
		}
		if !w.wait(life, wait, deadline) {
			return false
		}
	}
}

// waiter waits for a wake-up channel, within a deadline and the life of
// what waits, with one timer for all its waits.
type waiter struct{ t *time.Timer }

// wait waits for wake: false if the deadline passed or life ended first.
func (w *waiter) wait(life context.Context, wake <-chan struct{}, deadline time.Time) bool {
	if w.t == nil {
		w.t = time.NewTimer(time.Until(deadline))
	}
	select {
	case <-wake:
		return true
	case <-w.t.C:
	case <-life.Done():
	}
	return false
}

func (w *waiter) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// release gives e's place back (any number of times).
func (a *admission) release(e *hsSlot) {
	a.mu.Lock()
	defer a.unlock()
	a.free(e)
}

// shut closes the parked connections, and from now on every connection
// that arrives; the waiting ones end on their own (the listener's life
// ends their waits).
func (a *admission) shut() {
	a.mu.Lock()
	defer a.unlock()
	a.closed = true
	for len(a.parked) > 0 {
		e := a.parked[0].parked[0]
		a.free(e)
		e.c.Close()
	}
}

// free gives e's place back. Called with mu held.
func (a *admission) free(e *hsSlot) {
	h := a.hosts[e.host]
	switch e.state {
	case slotFree:
		return
	case slotParked:
		if i := slices.Index(h.parked, e); i >= 0 {
			h.parked = slices.Delete(h.parked, i, i+1)
			a.nParked--
		}
		if len(h.parked) == 0 {
			a.unpark(h)
		}
	case slotWaiting, slotReady:
		a.unwait(e, h)
	case slotHeld:
		a.n--
		h.held--
		if a.freed != nil {
			close(a.freed)
			a.freed = nil
		}
	}
	e.state = slotFree
	a.drop(h)
}

// drop forgets h if it holds nothing. Called with mu held.
func (a *admission) drop(h *hostPlaces) {
	if h.held == 0 && h.waiting == 0 && len(h.parked) == 0 {
		delete(a.hosts, h.host)
	}
}

// unwait drops e from the waiting connections (unlock gives its place to
// a parked one). Called with mu held.
func (a *admission) unwait(e *hsSlot, h *hostPlaces) {
	if i := slices.Index(a.waiting, e); i >= 0 {
		a.waiting = slices.Delete(a.waiting, i, i+1)
		h.waiting--
	}
}

// remoteHost is the host a connection comes from, as a slot key: its IPv4
// address, or its IPv6 /64 (one host commonly has a whole /64).
func remoteHost(c *net.TCPConn) netip.Addr {
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	if ra == nil {
		return netip.Addr{}
	}
	return hostKey(ra.AddrPort().Addr())
}

// hostKey is the admission's key for address a: a itself (IPv4, or an
// IPv4-mapped IPv6 address, unmapped), or its IPv6 /64.
func hostKey(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// awaitRequest waits, until the read deadline set on tr, for a whole
// handshake message to have arrived on its connection, reading nothing:
// what follows reads it without waiting on the peer. It also returns once
// what has arrived cannot begin a message, or at the connection's end, for
// the read that follows to fail at once.
func awaitRequest(tr *tcpTransport) error {
	return awaitArrival(tr, hsHdrLen+maxHandshakeBody, requestArrived)
}

// awaitArrival is awaitRequest for a request that arrived says is there,
// looking at most at size bytes.
func awaitArrival(tr *tcpTransport, size int, arrived func([]byte) bool) error {
	b := make([]byte, size)
	return tr.rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return false
		case err != nil || n == 0:
			return true
		}
		return arrived(b[:n])
	})
}

// requestArrived reports, for the bytes b that have arrived on a connection
// to a listener (at least one), whether its wait for a handshake message is
// over: the whole message is there, or its header is and cannot begin one.
// Fewer bytes than a header keep it waiting, junk or not: the read that
// follows, in a handshake slot, would wait for the rest of the header.
func requestArrived(b []byte) bool {
	if len(b) < hsHdrLen {
		return false
	}
	_, body, err := parseHandshakeHeader(b[:hsHdrLen])
	return err != nil || len(b) >= hsHdrLen+body
}
