package onesided

import "github.com/rdmanet/rdma/verbs"

// Exposures: the ranges of Buffers a connection exposed to its peer
// (Expose), each registered on the connection's protection domain for the
// peer's access and named by a number its Desc carries, until Unexpose,
// the Buffer's Free (or its BufferPool.Put) or the connection's release.

// Exposure is a range of a Buffer (B: the root package's B)
// exposed to the peer.
type Exposure[B comparable] struct {
	Buf B
	MR  verbs.MR
}

// Exposures is a connection's live exposures by number, and the last
// number given. The connection's mu guards it.
type Exposures[B comparable] struct {
	byID map[uint32]Exposure[B]
	last uint32
}

// Add records b's range registered as mr and returns its number: never 0,
// unique among the live exposures. A number is reused only after it wrapped
// around; a stale Desc that names it is told apart by its rkey, address
// and length (take).
func (t *Exposures[B]) Add(b B, mr verbs.MR) uint32 {
	if t.byID == nil {
		t.byID = map[uint32]Exposure[B]{}
	}
	for {
		t.last++
		if _, used := t.byID[t.last]; !used && t.last != 0 {
			break
		}
	}
	t.byID[t.last] = Exposure[B]{Buf: b, MR: mr}
	return t.last
}

// Take removes and returns the live exposure d describes, which must match
// it in number, rkey, address and length; false (and nothing removed) for
// any other Desc. The caller deregisters it.
func (t *Exposures[B]) Take(d Desc) (Exposure[B], bool) {
	e := t.byID[d.ID]
	if e.MR == nil || e.MR.RKey() != d.RKey || e.MR.Addr() != d.Addr || uint64(e.MR.Len()) != d.Len {
		return Exposure[B]{}, false
	}
	delete(t.byID, d.ID)
	return e, true
}

// EndFor ends every exposure of b: once it returns, the dereg fence makes
// sure no access of the peer's touches b's memory.
func (t *Exposures[B]) EndFor(b B) {
	for id, e := range t.byID {
		if e.Buf == b {
			delete(t.byID, id)
			e.MR.Dereg()
		}
	}
}

// Holds reports whether b has a live exposure.
func (t *Exposures[B]) Holds(b B) bool {
	for _, e := range t.byID {
		if e.Buf == b {
			return true
		}
	}
	return false
}

// Live is the number of Live exposures (Stats.Exposed).
func (t *Exposures[B]) Live() int { return len(t.byID) }

// Release ends every exposure: deregisters them all, then calls forget for
// each one's Buffer. The table is empty afterwards.
func (t *Exposures[B]) Release(forget func(B)) {
	for _, e := range t.byID {
		e.MR.Dereg()
	}
	for _, e := range t.byID {
		forget(e.Buf)
	}
	t.byID = nil
}
