package soft

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// A region registered and deregistered again and again, alone or beside
// long-lived ones, never gets a key it had before: its stale rkeys find
// nothing. With an 8-bit generation per table slot, the 257th
// registration in one slot had the first one's key again.
func TestRKeysDoNotRepeat(t *testing.T) {
	p := &pd{}
	mem, err := verbs.AllocMemory(1 << 16)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mem.Free()) })
	buf := mem.Bytes()
	// Long-lived regions and windows in the table beside.
	var keep []*mr
	for i := range 37 {
		m, err := p.RegMR(buf[i*64:i*64+64], verbs.AccessLocalWrite)
		require.NoError(t, err)
		keep = append(keep, m.(*mr))
	}
	w, err := p.AllocMW()
	require.NoError(t, err)
	seen := map[uint32]bool{w.RKey(): true}
	for _, m := range keep {
		require.False(t, seen[m.key])
		seen[m.key] = true
	}
	first, err := p.RegMR(buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	stale := first.RKey()
	seen[stale] = true
	require.NoError(t, first.Dereg())
	const rounds = 1 << 17
	for i := range rounds {
		m, err := p.RegMR(buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteRead)
		require.NoError(t, err)
		k := m.RKey()
		if seen[k] {
			t.Fatalf("registration %d got key %#x again", i+1, k)
		}
		seen[k] = true
		assert.Nil(t, p.lookup(stale))
		if _, _, ok := p.remote(nil, stale, verbs.AddrOf(buf[4096:]), 8, verbs.AccessRemoteRead); ok {
			t.Fatalf("the first registration's rkey reaches registration %d", i+1)
		}
		require.Same(t, m, p.lookupLocal(k))
		require.NoError(t, m.Dereg())
		// Every so often a long-lived one goes and comes back, so that
		// slots move.
		if i%1000 == 0 {
			j := (i / 1000) % len(keep)
			require.NoError(t, keep[j].Dereg())
			m, err := p.RegMR(buf[j*64:j*64+64], verbs.AccessLocalWrite)
			require.NoError(t, err)
			keep[j] = m.(*mr)
			require.False(t, seen[keep[j].key])
			seen[keep[j].key] = true
		}
	}
	for _, m := range keep {
		require.Same(t, m, p.lookupLocal(m.key), "long-lived keys still found")
		require.NoError(t, m.Dereg())
	}
	require.NoError(t, w.Dealloc())
	p.mu.Lock()
	assert.Zero(t, p.nMR+p.nMW)
	p.mu.Unlock()
}
