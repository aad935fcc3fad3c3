package rdma

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// The registry of open connections and listeners, and the totals of the
// connections closed. Each connection and listener gets a number when it
// enters, from one sequence for both (as gRPC's channelz numbers its
// entities), kept while it is open and never given to another: the debug
// page's ids (package rdmadebug), by which it looks one up and pages
// through a server's thousands.

type statser interface{ Stats() ConnStats }

// regConn is a connection's entry.
type regConn struct {
	c        statser
	id       uint64
	listener uint64 // the accepting Listener's id; 0: dialed
}

// regListener is a listener's entry.
type regListener struct {
	l        *Listener
	id       uint64
	opened   time.Time
	accepted uint64 // connections it handed to Accept
}

// connRegistry holds them, under mu.
type connRegistry struct {
	mu        sync.Mutex
	open      map[statser]*regConn
	byID      map[uint64]*regConn
	ids       []uint64 // the open connections' ids, ascending, with some of closed ones (dead)
	dead      int      // ids of closed connections still in ids
	listeners map[*Listener]*regListener
	next      uint64     // the last id given
	opened    uint64     // connections registered so far
	closed    ConnTotals // summed over the connections closed so far
}

var registry connRegistry

// register enters an established connection into the registry.
func register(c statser) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.open == nil {
		registry.open = make(map[statser]*regConn)
		registry.byID = make(map[uint64]*regConn)
	}
	registry.next++
	registry.opened++
	e := &regConn{c: c, id: registry.next}
	registry.open[c] = e
	registry.byID[e.id] = e
	registry.ids = append(registry.ids, e.id) // ids only grow: still ascending
}

// unregister takes a closed connection out of the registry, adding what
// it did to the totals.
func unregister(c statser) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	e, ok := registry.open[c]
	if !ok {
		return
	}
	delete(registry.open, c)
	delete(registry.byID, e.id)
	registry.closed.add(c.Stats())
	registry.closed.Closed++
	// Closed ids leave ids in bulk, once they are half of it: a close
	// costs no copy of a 10,000-long slice.
	if registry.dead++; registry.dead > len(registry.ids)/2 {
		registry.ids = slices.DeleteFunc(registry.ids, func(id uint64) bool { return registry.byID[id] == nil })
		registry.dead = 0
	}
}

// registerListener enters a listener; unregisterListener takes it out.
func registerListener(l *Listener) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.listeners == nil {
		registry.listeners = make(map[*Listener]*regListener)
	}
	registry.next++
	registry.listeners[l] = &regListener{l: l, id: registry.next, opened: time.Now()}
}

func unregisterListener(l *Listener) {
	registry.mu.Lock()
	delete(registry.listeners, l)
	registry.mu.Unlock()
}

// accepted notes that l handed c out (c is registered by then).
func (l *Listener) accepted(c any) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	rl := registry.listeners[l]
	if rl == nil {
		return
	}
	rl.accepted++
	if s, ok := c.(statser); ok {
		if e := registry.open[s]; e != nil {
			e.listener = rl.id
		}
	}
}

// totalsAndOpen is the closed connections' totals, Opened set, and the
// open connections (for ReadProcessStats).
func (r *connRegistry) totalsAndOpen() (ConnTotals, []statser) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.closed
	t.Opened = r.opened
	open := make([]statser, 0, len(r.open))
	for c := range r.open {
		open = append(open, c)
	}
	return t, open
}

// entriesFrom returns the entries of open connections with an id of at
// least start, in id order: those of listener only unless it is 0, at
// most limit unless it is 0; and the id after the last one returned when
// more follow (0: none).
func (r *connRegistry) entriesFrom(start uint64, limit int, listener uint64) (out []regConn, next uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearch(r.ids, start)
	for ; i < len(r.ids); i++ {
		e := r.byID[r.ids[i]]
		if e == nil || listener != 0 && e.listener != listener {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, e.id
		}
		out = append(out, *e)
	}
	return out, 0
}

// stats is e's connection's statistics, with its ids.
func (e regConn) stats() ConnStats {
	s := e.c.Stats()
	s.ID, s.ListenerID = e.id, e.listener
	return s
}

// OpenConnStats returns the statistics of every open connection (Conn and
// RsocketConn), in the order they were established.
func OpenConnStats() []ConnStats {
	page, _ := ConnStatsPage(0, 0, 0)
	return page
}

// ConnStatsPage returns the statistics of the open connections whose ID
// is start or above, in ID order (the order they were established): at
// most limit of them (0: all), and of the listener with ID listener only
// unless it is 0. next is the start of the following page, 0 when there
// is none. A page costs what its connections' Stats cost, whatever the
// number open: a server with 10,000 connections is read a page at a time.
func ConnStatsPage(start uint64, limit int, listener uint64) (page []ConnStats, next uint64) {
	entries, next := registry.entriesFrom(start, max(limit, 0), listener)
	page = make([]ConnStats, len(entries))
	for i, e := range entries {
		page[i] = e.stats()
	}
	return page, next
}

// ConnStatsByID returns the statistics of the open connection with ID id;
// ok is false when none is open with it.
func ConnStatsByID(id uint64) (s ConnStats, ok bool) {
	registry.mu.Lock()
	e := registry.byID[id]
	var cp regConn
	if e != nil {
		cp = *e
	}
	registry.mu.Unlock()
	if e == nil {
		return ConnStats{}, false
	}
	return cp.stats(), true
}

// ListenerStats is an open Listener as the registry sees it.
type ListenerStats struct {
	ID       uint64 // in the same sequence as ConnStats.ID
	Addr     string
	Provider string // "soft" or "rdmacore" (which also accepts soft unless Config.RDMAOnly)
	Wire     string // "stream" or "rsocket"
	Opened   time.Time
	Accepted uint64 // connections it handed to Accept
	Open     int    // of those, the ones open now
	Backlog  int    // established connections waiting for Accept
	Capacity int    // how many may wait
}

// OpenListenerStats returns every open Listener, in the order they were
// opened.
func OpenListenerStats() []ListenerStats {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := make([]ListenerStats, 0, len(registry.listeners))
	for l, rl := range registry.listeners {
		wire := "stream"
		if l.rs != nil {
			wire = WireRsocket
		}
		out = append(out, ListenerStats{ID: rl.id, Addr: addrString(l.addr), Provider: l.provider, Wire: wire,
			Opened: rl.opened, Accepted: rl.accepted, Backlog: len(l.ready), Capacity: cap(l.ready)})
	}
	open := map[uint64]int{}
	for _, e := range registry.open {
		if e.listener != 0 {
			open[e.listener]++
		}
	}
	for i := range out {
		out[i].Open = open[out[i].ID]
	}
	slices.SortFunc(out, func(a, b ListenerStats) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// transportInfo is what the transport under qp says of itself: on soft's
// TCP path the kernel's round-trip time and retransmits (TCP_INFO).
func transportInfo(provider string, qp verbs.QP) (time.Duration, uint64) {
	if provider != ProviderSoft || qp == nil || soft.Carrier(qp) != "tcp" {
		return 0, 0
	}
	rtt, retrans, _ := soft.TCPInfo(qp)
	return rtt, retrans
}
