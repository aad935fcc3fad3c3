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
// Every TCP connection the listener accepts gets a goroutine that waits,
// holding nothing but the connection, until the connection's whole request
// has arrived (at most the handshake timeout): a silent or slow connection
// costs a parked goroutine and a descriptor, and when maxWaiting wait, the
// oldest that has been without a request for silentAfter is ended for a
// newcomer. A connection whose request is there takes one of the listener's
// handshake slots, in which the request is read and set up without waiting
// on the peer. Slots bound that work in all (SetMaxHandshakes) and per
// remote host (SetMaxHandshakesPerHost), so that one host cannot lock out
// the others.
//
// Nothing honest is refused: a connection that finds no free slot waits
// for one, and when maxWaiting wait with their requests there, the listener
// accepts nothing more until one has moved on (the kernel's listen queue
// holds what comes meanwhile). A client that dials thousands of
// connections at once from one host, a pool warming up, gets them all.
type admission struct {
	mu          sync.Mutex
	max         int
	perHost     int
	maxWaiting  int
	silentAfter time.Duration
	n           int                      // slots held
	byHost      map[netip.Addr][]*hsSlot // slots held
	waiting     []*hsSlot                // connections without a slot, in arrival order
	// freed, when somebody waits for a slot, is closed (and dropped) when
	// one is given back; room, when the accept loop waits for the waiting
	// list to shrink, when it does.
	freed, room chan struct{}
}

// silentAfter is how long a connection without a slot must have been
// without its request before a newer one may end it. A client that dials
// thousands of connections at once may take a good part of a second to
// write each its request.
const silentAfter = time.Second

// hsSlot is one accepted connection's place in its listener's admission.
type hsSlot struct {
	c       *net.TCPConn
	host    netip.Addr
	state   uint8
	arrived time.Time // when it was accepted
}

const (
	slotWaiting = iota // no slot yet, its request not yet all there
	slotReady          // no slot yet, its request there
	slotHeld           // its request being read and set up
	slotFree           // done, or ended
)

func newAdmission(maxSlots, perHost int) *admission {
	return &admission{max: maxSlots, perHost: perHost, maxWaiting: 16 * maxSlots,
		silentAfter: silentAfter, byHost: map[netip.Addr][]*hsSlot{}}
}

// arrive records c, just accepted. When maxWaiting connections already wait,
// the oldest that has been without its request for silentAfter is ended to
// make room; when none has, the listener is behind on honest work (a burst
// of dials), and arrive returns a channel closed when one has moved on:
// the caller accepts nothing more until then or until one has been silent
// long enough.
func (a *admission) arrive(c *net.TCPConn) (*hsSlot, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiting) >= a.maxWaiting {
		now := time.Now()
		i := slices.IndexFunc(a.waiting, func(w *hsSlot) bool {
			return w.state == slotWaiting && now.Sub(w.arrived) >= a.silentAfter
		})
		if i < 0 {
			if a.room == nil {
				a.room = make(chan struct{})
			}
			return nil, a.room
		}
		old := a.waiting[i]
		a.free(old)
		old.c.Close() // its wait for the request then fails and returns
	}
	e := &hsSlot{c: c, host: remoteHost(c), arrived: time.Now()}
	a.waiting = append(a.waiting, e)
	return e, nil
}

// take gives e, whose request is there, a slot. ok is false when e has been
// ended; otherwise a nil wait means it has its slot, and a non-nil one is
// closed when a slot is given back.
func (a *admission) take(e *hsSlot) (ok bool, wait <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.state != slotWaiting && e.state != slotReady {
		return false, nil
	}
	e.state = slotReady
	if a.n >= a.max || len(a.byHost[e.host]) >= a.perHost {
		if a.freed == nil {
			a.freed = make(chan struct{})
		}
		return true, a.freed
	}
	a.unwait(e)
	e.state = slotHeld
	a.byHost[e.host] = append(a.byHost[e.host], e)
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
	defer a.mu.Unlock()
	a.free(e)
}

// free gives e's place back. Called with mu held.
func (a *admission) free(e *hsSlot) {
	switch e.state {
	case slotFree:
		return
	case slotWaiting, slotReady:
		a.unwait(e)
		e.state = slotFree
		return
	}
	e.state = slotFree
	a.n--
	list := a.byHost[e.host]
	if i := slices.Index(list, e); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(a.byHost, e.host)
	} else {
		a.byHost[e.host] = list
	}
	if a.freed != nil {
		close(a.freed)
		a.freed = nil
	}
}

// unwait drops e from the waiting list. Called with mu held.
func (a *admission) unwait(e *hsSlot) {
	if i := slices.Index(a.waiting, e); i >= 0 {
		a.waiting = slices.Delete(a.waiting, i, i+1)
		if a.room != nil {
			close(a.room)
			a.room = nil
		}
	}
}

// remoteHost is the host a connection comes from, as a slot key: its IPv4
// address, or its IPv6 /64 (one host commonly has a whole /64).
func remoteHost(c *net.TCPConn) netip.Addr {
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	if ra == nil {
		return netip.Addr{}
	}
	a := ra.AddrPort().Addr().Unmap().WithZone("")
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
	b := make([]byte, hsHdrLen+maxHandshakeBody)
	return tr.rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return false
		case err != nil || n == 0:
			return true
		case n < hsHdrLen:
			return false
		}
		_, body, err := parseHandshakeHeader(b[:hsHdrLen])
		return err != nil || n >= hsHdrLen+body
	})
}
