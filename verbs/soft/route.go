package soft

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Route lookups for ResolveAddr, remembered for a short while.
//
// ResolveAddr without a source address asks the kernel which source its
// route to the destination picks (routeSource), as the kernel's
// rdma_resolve_addr does. Here that takes a socket and three more system
// calls, about 40 us of a 600 us dial-to-first-echo on loopback; a client
// opening many connections asks about the same few destinations again
// and again. The answer is kept for routeCacheTTL.
//
// The remembered source is not bound: a connection whose source was not
// given dials unbound, so the kernel picks the source on the current
// routes at connect, and a stale answer only shows in LocalAddr before
// the connection is up (it is the connection's own address after). A
// dial that fails forgets the destination's answer.

// routeCacheTTL is how long a route lookup's answer is reused.
const routeCacheTTL = time.Second

// routeCacheMax bounds the remembered destinations; past it the cache
// starts over.
const routeCacheMax = 1024

type routeEntry struct {
	src     net.IP
	expires time.Time
}

type routeCache struct {
	mu sync.Mutex
	m  map[netip.AddrPort]routeEntry // by destination (zone and port included)
}

var routes routeCache

// lookupRoute is routeSource; tests count the lookups through it.
var lookupRoute = routeSource

// routeKey is dst as a map key. The port is part of it only to keep the
// lookup the same as routeSource's (which connects to dst's port).
func routeKey(dst *net.TCPAddr) (netip.AddrPort, bool) {
	ip, ok := netip.AddrFromSlice(dst.IP)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap().WithZone(dst.Zone), uint16(dst.Port)), true
}

// source returns the source address of the route to dst: remembered, or
// looked up (and remembered).
func (c *routeCache) source(dst *net.TCPAddr, now time.Time) (net.IP, error) {
	k, ok := routeKey(dst)
	if ok {
		c.mu.Lock()
		e, hit := c.m[k]
		c.mu.Unlock()
		if hit && now.Before(e.expires) {
			return append(net.IP(nil), e.src...), nil
		}
	}
	src, err := lookupRoute(dst)
	if err != nil || !ok {
		return src, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= routeCacheMax {
		c.m = make(map[netip.AddrPort]routeEntry)
	}
	c.m[k] = routeEntry{src: append(net.IP(nil), src...), expires: now.Add(routeCacheTTL)}
	c.mu.Unlock()
	return src, nil
}

// forget drops what is remembered of the route to dst.
func (c *routeCache) forget(dst *net.TCPAddr) {
	if k, ok := routeKey(dst); ok {
		c.mu.Lock()
		delete(c.m, k)
		c.mu.Unlock()
	}
}
