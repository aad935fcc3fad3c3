package rdma

import (
	"time"

	"github.com/rdmanet/rdma/internal/registry"
	"github.com/rdmanet/rdma/verbs/soft"
)

// The process's registry of open connections and listeners, and the
// totals of the connections closed (internal/registry): the numbers
// ConnStats.ID and ListenerStats.ID, and what ReadProcessStats sums.

type statser interface{ Stats() ConnStats }

var processRegistry registry.Registry[statser, *Listener, ConnTotals]

// register enters an established connection into the registry.
func register(c statser) { processRegistry.Add(c) }

// unregister takes a closed connection out of the registry, adding what
// it did to the totals.
func unregister(c statser) {
	processRegistry.Remove(c, func(closed *ConnTotals) {
		closed.add(c.Stats())
		closed.Closed++
	})
}

// registerListener enters a listener; unregisterListener takes it out.
func registerListener(l *Listener)   { processRegistry.AddListener(l) }
func unregisterListener(l *Listener) { processRegistry.RemoveListener(l) }

// accepted notes that l handed c out (c is registered by then).
func (l *Listener) accepted(c any) {
	s, ok := c.(statser)
	processRegistry.Accepted(l, s, ok)
}

// statsOf is e's connection's statistics, with its ids.
func statsOf(e registry.Conn[statser]) ConnStats {
	s := e.C.Stats()
	s.ID, s.ListenerID = e.ID, e.Listener
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
	entries, next := processRegistry.EntriesFrom(start, max(limit, 0), listener)
	page = make([]ConnStats, len(entries))
	for i, e := range entries {
		page[i] = statsOf(e)
	}
	return page, next
}

// ConnStatsByID returns the statistics of the open connection with ID id;
// ok is false when none is open with it.
func ConnStatsByID(id uint64) (s ConnStats, ok bool) {
	e, ok := processRegistry.ByID(id)
	if !ok {
		return ConnStats{}, false
	}
	return statsOf(e), true
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
	entries := processRegistry.Listeners()
	out := make([]ListenerStats, len(entries))
	for i, rl := range entries {
		l, wire := rl.L, "stream"
		if l.rs != nil {
			wire = WireRsocket
		}
		out[i] = ListenerStats{ID: rl.ID, Addr: addrString(l.addr), Provider: l.provider, Wire: wire,
			Opened: rl.Opened, Accepted: rl.Accepted, Open: rl.Open, Backlog: len(l.ready), Capacity: cap(l.ready)}
	}
	return out
}

// ReadProcessStats returns the totals over every connection the process
// has had and the devices' counters (read from sysfs at each call).
func ReadProcessStats() ProcessStats {
	t, opened, open := processRegistry.TotalsAndOpen()
	t.Opened = opened
	byPath := make(map[string]int)
	for _, c := range open {
		s := c.Stats()
		t.add(s)
		byPath[s.Path]++
	}
	return ProcessStats{Open: len(open), OpenByPath: byPath, Totals: t, Devices: ReadDeviceCounters(), Soft: soft.ReadCounters()}
}
