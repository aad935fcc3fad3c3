package registry

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conn and listener stand for the root package's connections and
// listeners: the registry only compares them.
type (
	conn     struct{ _ int }
	listener struct{ _ int }
	totals   struct{ closed, bytes int }
)

type reg = Registry[*conn, *listener, totals]

func ids(es []Conn[*conn]) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// Connections and listeners share one sequence of numbers; a closed
// connection's number is never given again, and its totals are counted
// once.
func TestRegistryNumbersAndTotals(t *testing.T) {
	var r reg
	a, b := new(conn), new(conn)
	r.Add(a)
	l := new(listener)
	r.AddListener(l)
	r.Add(b)
	e, ok := r.ByID(3)
	require.True(t, ok)
	assert.Same(t, b, e.C, "the listener took number 2")
	count := func(t *totals) { t.closed++; t.bytes += 10 }
	r.Remove(a, count)
	r.Remove(a, count) // twice: not entered any more
	r.Remove(new(conn), count)
	_, ok = r.ByID(1)
	assert.False(t, ok, "a closed connection is not found")
	c := new(conn)
	r.Add(c)
	closed, opened, open := r.TotalsAndOpen()
	assert.Equal(t, totals{closed: 1, bytes: 10}, closed, "each closed connection counted once")
	assert.Equal(t, uint64(3), opened)
	assert.ElementsMatch(t, []*conn{b, c}, open)
	e, ok = r.ByID(4)
	require.True(t, ok, "numbers go on from the last given")
	assert.Same(t, c, e.C)
}

// Pages come in number order, limit at a time, of one listener's
// connections when asked, across the bulk removal of closed numbers.
func TestRegistryPages(t *testing.T) {
	var r reg
	l := new(listener)
	r.AddListener(l) // 1
	conns := make([]*conn, 10)
	for i := range conns {
		conns[i] = new(conn)
		r.Add(conns[i]) // 2..11
		if i%2 == 0 {
			r.Accepted(l, conns[i], true)
		}
	}
	r.Accepted(l, nil, false) // a connection of another kind: counted, not entered
	for _, c := range conns[:6] {
		r.Remove(c, func(*totals) {}) // past half of the ids: they are dropped in bulk
	}
	page, next := r.EntriesFrom(0, 3, 0)
	assert.Equal(t, []uint64{8, 9, 10}, ids(page))
	assert.Equal(t, uint64(11), next)
	page, next = r.EntriesFrom(next, 3, 0)
	assert.Equal(t, []uint64{11}, ids(page))
	assert.Zero(t, next, "no more")
	page, _ = r.EntriesFrom(0, 0, 1)
	assert.Equal(t, []uint64{8, 10}, ids(page), "the listener's own, accepted ones")
	assert.Equal(t, uint64(1), page[0].Listener)

	ls := r.Listeners()
	require.Len(t, ls, 1)
	assert.Same(t, l, ls[0].L)
	assert.Equal(t, uint64(6), ls[0].Accepted, "five entered connections and one of another kind")
	assert.Equal(t, 2, ls[0].Open, "of which two are open")
	r.RemoveListener(l)
	assert.Empty(t, r.Listeners())
}
