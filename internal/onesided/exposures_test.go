package onesided

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// fakeMR is a registration without a provider: what the zero-copy parts'
// tables look at (address, length, rkey) and whether it was deregistered.
type fakeMR struct {
	verbs.MR // nil: the parts must not call anything else
	addr     uint64
	n        int
	rkey     uint32
	deregs   int
}

func (m *fakeMR) Addr() uint64 { return m.addr }
func (m *fakeMR) Len() int     { return m.n }
func (m *fakeMR) RKey() uint32 { return m.rkey }
func (m *fakeMR) Dereg() error { m.deregs++; return nil }

// buffer stands for the root package's Buffer: the tables only compare
// pointers to it.
type buffer struct{ _ int } // not zero-sized: each new(buffer) is a pointer of its own

// descOf is the Desc of exposure id registered as mr.
func descOf(id uint32, mr *fakeMR) Desc {
	return Desc{Access: AccessRead, Addr: mr.addr, Len: uint64(mr.n), RKey: mr.rkey, ID: id}
}

func TestExposureTableNumbers(t *testing.T) {
	var x Exposures[*buffer]
	b := new(buffer)
	first := x.Add(b, &fakeMR{})
	assert.Equal(t, uint32(1), first, "numbers start at 1: 0 names no exposure")
	assert.Equal(t, uint32(2), x.Add(b, &fakeMR{}))
	// At the wrap: 0 is skipped, and so are the numbers still live.
	x.last = math.MaxUint32 - 1
	assert.Equal(t, uint32(math.MaxUint32), x.Add(b, &fakeMR{}))
	assert.Equal(t, uint32(3), x.Add(b, &fakeMR{}), "past 0 and the live 1 and 2")
	assert.Equal(t, 4, x.Live())
}

func TestExposureTableTakesOnlyALiveMatch(t *testing.T) {
	var x Exposures[*buffer]
	b := new(buffer)
	mr := &fakeMR{addr: 0x1000, n: 64, rkey: 0x42}
	id := x.Add(b, mr)
	d := descOf(id, mr)
	stale := []Desc{d, d, d, d}
	stale[0].ID++      // another number
	stale[1].RKey++    // a reused number's earlier registration
	stale[2].Addr += 8 // another range
	stale[3].Len--     // a range of another length
	for i, s := range stale {
		_, ok := x.Take(s)
		assert.False(t, ok, "stale Desc %d", i)
	}
	assert.Equal(t, 1, x.Live(), "a stale Desc removes nothing")
	e, ok := x.Take(d)
	require.True(t, ok)
	assert.Same(t, b, e.Buf)
	assert.Same(t, mr, e.MR.(*fakeMR))
	assert.Zero(t, mr.deregs, "the caller deregisters what take returns")
	_, ok = x.Take(d)
	assert.False(t, ok, "taken once only")
	assert.Zero(t, x.Live())
	assert.False(t, x.Holds(b))
}

func TestExposureTableEndFor(t *testing.T) {
	var x Exposures[*buffer]
	b, other := new(buffer), new(buffer)
	mine := []*fakeMR{{rkey: 1}, {rkey: 2}}
	for _, mr := range mine {
		x.Add(b, mr)
	}
	theirs := &fakeMR{rkey: 3}
	x.Add(other, theirs)
	require.True(t, x.Holds(b))
	x.EndFor(b)
	for _, mr := range mine {
		assert.Equal(t, 1, mr.deregs, "each exposure of b ends")
	}
	assert.False(t, x.Holds(b))
	assert.True(t, x.Holds(other), "another Buffer's exposure stays")
	assert.Zero(t, theirs.deregs)
	assert.Equal(t, 1, x.Live())
}

func TestExposureTableRelease(t *testing.T) {
	var x Exposures[*buffer]
	bufs := []*buffer{new(buffer), new(buffer)}
	mrs := []*fakeMR{{}, {}}
	for i, b := range bufs {
		x.Add(b, mrs[i])
	}
	var forgot []*buffer
	x.Release(func(b *buffer) {
		for _, mr := range mrs {
			assert.Equal(t, 1, mr.deregs, "every exposure is deregistered before its Buffer is forgotten")
		}
		forgot = append(forgot, b)
	})
	assert.ElementsMatch(t, bufs, forgot)
	assert.Zero(t, x.Live())
	assert.False(t, x.Holds(bufs[0]))
}
