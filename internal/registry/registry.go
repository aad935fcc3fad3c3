// Package registry holds the process's registry of open connections and
// listeners, and the totals of the connections closed. Each connection and
// listener gets a number when it enters, from one sequence for both (as
// gRPC's channelz numbers its entities), kept while it is open and never
// given to another: the debug page's ids (package rdmadebug), by which it
// looks one up and pages through a server's thousands. The root package
// keeps one Registry of its connections (C), listeners (L) and ConnTotals
// (T), and turns its entries into ConnStats and ListenerStats.
package registry

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Conn is a connection's entry.
type Conn[C any] struct {
	C        C
	ID       uint64
	Listener uint64 // the accepting listener's ID; 0: dialed
}

// Listener is a listener's entry.
type Listener[L any] struct {
	L        L
	ID       uint64
	Opened   time.Time
	Accepted uint64 // connections it handed to Accept
	Open     int    // of those, the ones open now (Listeners sets it)
}

// Registry holds the entries, under its mu. The zero Registry is empty
// and ready to use.
type Registry[C, L comparable, T any] struct {
	mu        sync.Mutex
	open      map[C]*Conn[C]
	byID      map[uint64]*Conn[C]
	ids       []uint64 // the open connections' ids, ascending, with some of closed ones (dead)
	dead      int      // ids of closed connections still in ids
	listeners map[L]*Listener[L]
	next      uint64 // the last id given
	opened    uint64 // connections registered so far
	closed    T      // summed over the connections closed so far
}

// Add enters an established connection.
func (r *Registry[C, L, T]) Add(c C) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = make(map[C]*Conn[C])
		r.byID = make(map[uint64]*Conn[C])
	}
	r.next++
	r.opened++
	e := &Conn[C]{C: c, ID: r.next}
	r.open[c] = e
	r.byID[e.ID] = e
	r.ids = append(r.ids, e.ID) // ids only grow: still ascending
}

// Remove takes a closed connection out, calling count (under the
// registry's lock) to add what it did to the closed connections' totals.
// A connection not entered is left alone, and count is not called.
func (r *Registry[C, L, T]) Remove(c C, count func(closed *T)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.open[c]
	if !ok {
		return
	}
	delete(r.open, c)
	delete(r.byID, e.ID)
	count(&r.closed)
	// Closed ids leave ids in bulk, once they are half of it: a close
	// costs no copy of a 10,000-long slice.
	if r.dead++; r.dead > len(r.ids)/2 {
		r.ids = slices.DeleteFunc(r.ids, func(id uint64) bool { return r.byID[id] == nil })
		r.dead = 0
	}
}

// AddListener enters a listener; RemoveListener takes it out.
func (r *Registry[C, L, T]) AddListener(l L) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listeners == nil {
		r.listeners = make(map[L]*Listener[L])
	}
	r.next++
	r.listeners[l] = &Listener[L]{L: l, ID: r.next, Opened: time.Now()}
}

func (r *Registry[C, L, T]) RemoveListener(l L) {
	r.mu.Lock()
	delete(r.listeners, l)
	r.mu.Unlock()
}

// Accepted notes that l handed a connection out; when it is an entered
// connection (isConn), c's entry names l as its listener.
func (r *Registry[C, L, T]) Accepted(l L, c C, isConn bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rl := r.listeners[l]
	if rl == nil {
		return
	}
	rl.Accepted++
	if !isConn {
		return
	}
	if e := r.open[c]; e != nil {
		e.Listener = rl.ID
	}
}

// TotalsAndOpen is the closed connections' totals, how many connections
// were entered so far, and the open ones.
func (r *Registry[C, L, T]) TotalsAndOpen() (closed T, opened uint64, open []C) {
	r.mu.Lock()
	defer r.mu.Unlock()
	open = make([]C, 0, len(r.open))
	for c := range r.open {
		open = append(open, c)
	}
	return r.closed, r.opened, open
}

// EntriesFrom returns the entries of open connections with an id of at
// least start, in id order: those of listener only unless it is 0, at
// most limit unless it is 0; and the id after the last one returned when
// more follow (0: none).
func (r *Registry[C, L, T]) EntriesFrom(start uint64, limit int, listener uint64) (out []Conn[C], next uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearch(r.ids, start)
	for ; i < len(r.ids); i++ {
		e := r.byID[r.ids[i]]
		if e == nil || listener != 0 && e.Listener != listener {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, e.ID
		}
		out = append(out, *e)
	}
	return out, 0
}

// ByID is the entry of the open connection with ID id; false when none is
// open with it.
func (r *Registry[C, L, T]) ByID(id uint64) (Conn[C], bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.byID[id]
	if e == nil {
		return Conn[C]{}, false
	}
	return *e, true
}

// Listeners returns the open listeners' entries, with how many of the
// connections each accepted are open now, in the order they were opened.
func (r *Registry[C, L, T]) Listeners() []Listener[L] {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Listener[L], 0, len(r.listeners))
	for _, rl := range r.listeners {
		out = append(out, *rl)
	}
	open := map[uint64]int{}
	for _, e := range r.open {
		if e.Listener != 0 {
			open[e.Listener]++
		}
	}
	for i := range out {
		out[i].Open = open[out[i].ID]
	}
	slices.SortFunc(out, func(a, b Listener[L]) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
