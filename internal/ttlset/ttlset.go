// Package ttlset is a bounded set of keys whose entries expire: when it is
// full, expired entries make room first, then the oldest goes. The dialer
// keeps its soft-only peers in one (the root package's mixedmemory.go).
package ttlset

import (
	"sync"
	"time"
)

// Set holds at most max keys, each for ttl after it was remembered. It is
// safe for concurrent use.
type Set struct {
	mu      sync.Mutex
	max     int
	ttl     time.Duration
	entries map[string]time.Time // when each was remembered
}

// New returns an empty Set of at most max keys that expire after ttl.
func New(max int, ttl time.Duration) *Set {
	return &Set{max: max, ttl: ttl, entries: make(map[string]time.Time)}
}

// Remember adds key at now, making room if the set is full: expired
// entries go, then the oldest.
func (m *Set) Remember(key string, now time.Time) {
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

// Recall reports whether key is remembered at now, and since when; an
// expired entry is dropped.
func (m *Set) Recall(key string, now time.Time) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.entries[key]
	if ok && now.Sub(at) >= m.ttl {
		delete(m.entries, key)
		return time.Time{}, false
	}
	return at, ok
}

// Forget drops key.
func (m *Set) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, key)
}

// Len is how many keys are held, expired ones not yet dropped included.
func (m *Set) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Clear drops every key.
func (m *Set) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.entries)
}
