package collectives

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Handshake admission on a bootstrap listener (the root's, and each rank's
// for its lower-ranked peers).
//
// An accepted conn is heard out in a place of its own: a goroutine that
// challenges it and reads its hello under a deadline of its own (the hello
// timeout, or the bootstrap's if sooner). Places are bounded in all
// (maxHandshakes) and per remote host (maxHandshakesPerHost; an IPv6 host
// counts as its /64), so that one host cannot take the places of the
// others. An honest conn holds its place for a round trip; a silent one
// holds it until its hello timeout, unless a newcomer needs it:
//
//   - a newcomer from a host that holds all its places takes the place of
//     that host's oldest conn if that one has been held for silentAfter,
//     and is otherwise turned away;
//   - when every place is held, the listener accepts nothing (the kernel's
//     listen queue, or the rdma Listener's, holds what comes) until a place
//     is given back or the oldest has been held for silentAfter; the next
//     newcomer then takes the oldest place (its own host's, as above, if
//     its host holds all its places).
//
// A conn turned away or put out of its place is told so (msgBusy) before
// it is closed, and its rank dials again within Join's deadline: a full
// listener delays a rank, never fails it. So a host that holds any number
// of silent conns delays no rank of another host at all, and one of its
// own by about silentAfter; what it cannot be kept from is competing with
// the ranks of its own address for that address's places, by dialing
// again without pause.
const (
	maxHandshakes        = 256
	maxHandshakesPerHost = 32
	// silentAfter is how long a conn must have held its place before a
	// newcomer may take it: an honest rank answers within a round trip.
	silentAfter = time.Second
	// noticeTimeout bounds the busy notice: its write, and the wait for the
	// peer to close, so that the peer reads it rather than a reset.
	noticeTimeout = time.Second
)

// arrival is a conn that passed a listener's handshake.
type arrival struct {
	conn  net.Conn
	rank  int
	addr  string // hello: where the rank listens
	nonce nonce  // hello: the rank's nonce, for the table's proof
}

// acceptor accepts conns on a bootstrap listener and runs the handshake of
// each in a goroutine of its own, in one of its places: a silent or hostile
// conn delays nobody. Conns that pass come out of arrivals; the others are
// closed.
type acceptor struct {
	ln        net.Listener
	handshake func(c net.Conn) (arrival, error)
	deadline  time.Time // the bootstrap's, if any

	arrivals chan arrival
	errc     chan error // the Accept error that ended the loop
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	places  places
	pending map[net.Conn]bool // in a handshake, being told it is busy, or sent and not yet taken
}

func startAcceptor(ln net.Listener, deadline time.Time, handshake func(net.Conn) (arrival, error)) *acceptor {
	return startAcceptorPlaces(ln, deadline, handshake, newPlaces(maxHandshakes, maxHandshakesPerHost, silentAfter))
}

// startAcceptorPlaces is startAcceptor with places of its own (tests).
func startAcceptorPlaces(ln net.Listener, deadline time.Time, handshake func(net.Conn) (arrival, error), ps places) *acceptor {
	a := &acceptor{
		ln:        ln,
		handshake: handshake,
		deadline:  deadline,
		arrivals:  make(chan arrival),
		errc:      make(chan error, 1),
		done:      make(chan struct{}),
		places:    ps,
		pending:   map[net.Conn]bool{},
	}
	a.wg.Add(1)
	go a.loop()
	return a
}

// longAgo is a deadline in the past: it wakes a conn's blocked Read and Write.
var longAgo = time.Unix(1, 0)

func (a *acceptor) loop() {
	defer a.wg.Done()
	var w roomWaiter
	defer w.stop()
	retry := time.Duration(0)
	for {
		if !a.awaitRoom(&w) {
			return
		}
		c, err := a.ln.Accept()
		if err != nil {
			// Out of descriptors: wait for some to close, as net/http does.
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				retry = min(max(2*retry, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(retry):
					continue
				case <-a.done:
					return
				}
			}
			a.errc <- err
			return
		}
		retry = 0
		a.mu.Lock()
		now := time.Now()
		p, victim := a.places.admit(remoteHost(c.RemoteAddr()), now)
		a.pending[c] = true
		if victim != nil {
			// Its serve tells it, once woken; under mu, so that its
			// notice's own deadline is set after this one.
			_ = victim.conn.SetDeadline(longAgo)
		}
		if p != nil {
			p.conn = c
			_ = c.SetDeadline(earliest(a.deadline, now.Add(helloTimeout)))
		}
		a.mu.Unlock()
		a.wg.Add(1)
		if p == nil {
			go a.busy(c)
		} else {
			go a.serve(c, p)
		}
	}
}

// awaitRoom waits until a newcomer may have a place: false once the
// acceptor stops.
func (a *acceptor) awaitRoom(w *roomWaiter) bool {
	for {
		a.mu.Lock()
		wake, in := a.places.room(time.Now())
		a.mu.Unlock()
		if wake == nil {
			return true
		}
		if !w.wait(wake, in, a.done) {
			return false
		}
	}
}

// roomWaiter waits for a place, with one timer for all its waits.
type roomWaiter struct{ t *time.Timer }

// wait waits until wake closes or in has passed: false if done closed first.
func (w *roomWaiter) wait(wake <-chan struct{}, in time.Duration, done <-chan struct{}) bool {
	if w.t == nil {
		w.t = time.NewTimer(in)
	} else {
		w.t.Reset(in)
	}
	defer w.t.Stop()
	select {
	case <-wake:
	case <-w.t.C:
	case <-done:
		return false
	}
	return true
}

func (w *roomWaiter) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

func (a *acceptor) serve(c net.Conn, p *place) {
	defer a.wg.Done()
	arr, err := a.handshake(c)
	a.mu.Lock()
	kept := a.places.leave(p)
	a.mu.Unlock()
	if !kept {
		// A newcomer took its place: whatever it said is dropped.
		a.tellBusy(c, true)
		return
	}
	if err == nil {
		select {
		case a.arrivals <- arr:
			return // the taker owns it, see take

		case <-a.done:
		}
	}
	a.drop(c)
}

// busy tells c, which found no place, to come back later.
func (a *acceptor) busy(c net.Conn) {
	defer a.wg.Done()
	a.tellBusy(c, false)
}

// tellBusy sends c the busy notice and closes it. When c may have sent
// something not read (its hello, in part), it waits (a little) for the
// peer, which closes on the notice, to close first: closing a TCP conn with
// unread bytes sends a reset, which may overtake the notice.
func (a *acceptor) tellBusy(c net.Conn, unread bool) {
	_ = c.SetDeadline(time.Now().Add(noticeTimeout))
	if _, err := c.Write(appendBusy(nil)); err == nil && unread {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<12))
	}
	a.drop(c)
}

// drop closes c, which nobody takes.
func (a *acceptor) drop(c net.Conn) {
	a.mu.Lock()
	delete(a.pending, c)
	a.mu.Unlock()
	c.Close()
}

// take is called by whoever receives arr from arrivals: the conn is theirs
// now, and stop leaves it alone.
func (a *acceptor) take(arr arrival) {
	a.mu.Lock()
	delete(a.pending, arr.conn)
	a.mu.Unlock()
}

// stop closes the listener and every conn not taken from arrivals, and
// waits for the acceptor's goroutines.
func (a *acceptor) stop() {
	a.ln.Close()
	close(a.done)
	a.mu.Lock()
	for c := range a.pending {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// place is a conn's place in a listener's handshakes.
type place struct {
	conn  net.Conn
	host  netip.Addr
	since time.Time
	state uint8
}

const (
	placeHeld  = iota
	placeTaken // a newcomer took it
	placeDone  // its handshake ended
)

// places is the bookkeeping of a listener's handshake places: no I/O, no
// lock of its own (the acceptor's mu guards it).
type places struct {
	max, perHost int
	after        time.Duration
	held         []*place // in the order they were given
	byHost       map[netip.Addr]int
	freed        chan struct{} // closed (and dropped) when a place is given back
}

func newPlaces(max, perHost int, after time.Duration) places {
	return places{max: max, perHost: perHost, after: after, byHost: map[netip.Addr]int{}}
}

// admit gives a newcomer from host, at now, a place: nil if it gets none.
// victim, if not nil, is the conn whose place it took (now placeTaken).
func (ps *places) admit(host netip.Addr, now time.Time) (p, victim *place) {
	switch {
	case ps.byHost[host] >= ps.perHost:
		victim = ps.oldest(now, func(q *place) bool { return q.host == host })
	case len(ps.held) >= ps.max:
		victim = ps.oldest(now, nil)
	default:
		return ps.add(host, now), nil
	}
	if victim == nil {
		return nil, nil
	}
	ps.remove(victim)
	victim.state = placeTaken
	return ps.add(host, now), victim
}

func (ps *places) add(host netip.Addr, now time.Time) *place {
	p := &place{host: host, since: now}
	ps.held = append(ps.held, p)
	ps.byHost[host]++
	return p
}

// oldest is the place held longest among those that match (nil: all), if
// it has been held for after.
func (ps *places) oldest(now time.Time, match func(*place) bool) *place {
	for _, q := range ps.held {
		if match == nil || match(q) {
			if now.Sub(q.since) >= ps.after {
				return q
			}
			return nil
		}
	}
	return nil
}

// room says whether a newcomer at now may have a place (or take one): a
// nil wake. Otherwise wake is closed when a place is given back, and in is
// how long until the oldest place may be taken.
func (ps *places) room(now time.Time) (wake <-chan struct{}, in time.Duration) {
	if len(ps.held) < ps.max {
		return nil, 0
	}
	in = ps.after - now.Sub(ps.held[0].since)
	if in <= 0 {
		return nil, 0
	}
	if ps.freed == nil {
		ps.freed = make(chan struct{})
	}
	return ps.freed, in
}

// leave gives p back at the end of its handshake: false if a newcomer took
// it first.
func (ps *places) leave(p *place) bool {
	if p.state == placeTaken {
		return false
	}
	if p.state == placeHeld {
		ps.remove(p)
		p.state = placeDone
	}
	return true
}

func (ps *places) remove(p *place) {
	if i := slices.Index(ps.held, p); i >= 0 {
		ps.held = slices.Delete(ps.held, i, i+1)
	}
	if ps.byHost[p.host]--; ps.byHost[p.host] <= 0 {
		delete(ps.byHost, p.host)
	}
	if ps.freed != nil {
		close(ps.freed)
		ps.freed = nil
	}
}

// remoteHost is the host a conn comes from, as a key of places: its IPv4
// address, or its IPv6 /64 (one host commonly has a whole /64).
func remoteHost(ra net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch a := ra.(type) {
	case nil:
		return netip.Addr{}
	case interface{ AddrPort() netip.AddrPort }: // *net.TCPAddr, *rdma.Addr
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(ra.String())
	}
	h := ap.Addr().Unmap().WithZone("")
	if h.Is6() {
		p, _ := h.Prefix(64)
		return p.Addr()
	}
	return h
}
