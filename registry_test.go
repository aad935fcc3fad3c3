package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeConn is a registry entry without a connection behind it.
type fakeConn struct{ n int }

func (f *fakeConn) Stats() ConnStats {
	local, remote := fakeAddrs(f.n)
	return ConnStats{BytesSent: uint64(f.n), Provider: "fake", Path: "fake", Wire: "stream", LocalAddr: local, RemoteAddr: remote, SinceSent: -1, SinceRecv: -1}
}

// The registry pages through 10,000 connections by id, a page costing its
// own entries only, finds one by id, and keeps ids stable and unique while
// half of the connections close between pages.
func TestRegistryPagesTenThousand(t *testing.T) {
	const n = 10000
	fakes := make([]*fakeConn, n)
	for i := range fakes {
		fakes[i] = &fakeConn{n: i}
		register(fakes[i])
	}
	t.Cleanup(func() {
		for _, f := range fakes {
			unregister(f)
		}
	})
	// walk pages through every open fake conn, limit at a time, and
	// returns the ids seen, in order, and the pages it took.
	walk := func(limit int) (ids []uint64, byN map[uint64]int, pages int) {
		byN = map[uint64]int{}
		start := uint64(0)
		for {
			page, next := ConnStatsPage(start, limit, 0)
			pages++
			require.LessOrEqual(t, len(page), limit)
			for _, s := range page {
				if s.Provider == "fake" {
					ids = append(ids, s.ID)
					byN[s.ID] = int(s.BytesSent)
				}
			}
			if next == 0 {
				return ids, byN, pages
			}
			require.Greater(t, next, start, "pages move forward")
			require.Equal(t, page[len(page)-1].ID+1 <= next, true)
			start = next
		}
	}
	ids, byN, pages := walk(1000)
	require.Len(t, ids, n, "every conn on exactly one page")
	assert.GreaterOrEqual(t, pages, n/1000)
	assert.IsIncreasing(t, ids)
	// Look each up by id: the same conn.
	for _, id := range []uint64{ids[0], ids[4321], ids[n-1]} {
		s, ok := ConnStatsByID(id)
		require.True(t, ok)
		assert.Equal(t, byN[id], int(s.BytesSent))
		assert.Equal(t, id, s.ID)
	}
	// Close every other one: the rest keep their ids; the closed are gone.
	for i := 0; i < n; i += 2 {
		unregister(fakes[i])
	}
	ids2, byN2, _ := walk(777)
	require.Len(t, ids2, n/2)
	for _, id := range ids2 {
		assert.Equal(t, byN[id], byN2[id], "id %d names the same conn", id)
		assert.Equal(t, 1, byN[id]%2)
	}
	_, ok := ConnStatsByID(ids[0])
	assert.False(t, ok, "a closed conn's id finds nothing")
	// A page from the middle starts at its id.
	page, _ := ConnStatsPage(ids[5001], 3, 0)
	require.Len(t, page, 3)
	assert.Equal(t, ids[5001], page[0].ID)
}
