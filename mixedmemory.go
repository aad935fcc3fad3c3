package rdma

import (
	"sync"
	"time"
)

// Mixed fleets remember, per process, the peers that answered an auto dial
// only on soft: a repeat dial to one goes to soft at once instead of
// waiting RDMAConnectTimeout again for an RDMA connection manager that is
// not there. The memory is bounded (softOnlyMax entries, the oldest go
// first) and expires (softOnlyTTL), so that a peer that gains a device is
// dialed over RDMA again within a minute; a mixed listener's soft side
// says that it has an RDMA side too (stream.FlagRDMACM), and the dialer
// then forgets the peer at once.

const (
	softOnlyMax = 1024
	softOnlyTTL = time.Minute
)

// softOnlyPeers is the process's memory, keyed by the peer's ip:port.
var softOnlyPeers = newPeerMemory(softOnlyMax, softOnlyTTL)

// peerMemory is a bounded, expiring set of peer addresses.
type peerMemory struct {
	mu      sync.Mutex
	max     int
	ttl     time.Duration
	entries map[string]time.Time // when each was remembered
}

func newPeerMemory(max int, ttl time.Duration) *peerMemory {
	return &peerMemory{max: max, ttl: ttl, entries: make(map[string]time.Time)}
}

// remember adds key at now, making room if the memory is full: expired
// entries go, then the oldest.
func (m *peerMemory) remember(key string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[key]; !ok && len(m.entries) >= m.max {
		var oldest string
		var oldestAt time.Time
		for k, at := range m.entries {
			if now.Sub(at) >= m.ttl {
				delete(m.entries, k)
			} else if oldest == "" || at.Before(oldestAt) {
				oldest, oldestAt = k, at
			}
		}
		if len(m.entries) >= m.max {
			delete(m.entries, oldest)
		}
	}
	m.entries[key] = now
}

// recall reports whether key is remembered at now, and since when; an
// expired entry is dropped.
func (m *peerMemory) recall(key string, now time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.entries[key]
	if ok && now.Sub(at) >= m.ttl {
		delete(m.entries, key)
		return time.Time{}, false
	}
	return at, ok
}

func (m *peerMemory) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
}

func (m *peerMemory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

func (m *peerMemory) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.entries)
}
