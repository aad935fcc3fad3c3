package streamconn

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/internal/zerocopy"
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

func TestRndvThreshold(t *testing.T) {
	old := zerocopy.SetRendezvousFloor(64 << 10)
	defer zerocopy.SetRendezvousFloor(old)
	for _, tc := range []struct {
		name   string
		t      int
		soft   bool
		agreed uint8
		want   int
	}{
		{"before the rendezvous' version", 0, false, stream.VersionRndv - 1, 0},
		{"configured before it", 1 << 20, false, stream.VersionRndv - 1, 0},
		{"turned off", -1, true, stream.VersionRndv, 0},
		{"default", 0, false, stream.VersionRndv, defaultRndvThreshold},
		{"soft's default", 0, true, stream.VersionRndv, SoftRndvThreshold},
		{"configured", 1 << 20, true, stream.VersionRndv, 1 << 20},
		{"below the floor", 1 << 10, false, stream.VersionRndv, 64 << 10},
	} {
		assert.Equal(t, tc.want, rndvThresholdFor(tc.t, tc.soft, tc.agreed), tc.name)
	}
}

func TestRndvDirectLen(t *testing.T) {
	assert.Zero(t, directLen(rndvDirectMin-1, 1<<30), "a small slice goes through the bounce buffer")
	assert.Equal(t, rndvDirectMin, directLen(rndvDirectMin, 1<<30))
	assert.Equal(t, 100, directLen(1<<20, 100), "no more than the rendezvous has left")
	assert.Equal(t, rndvPiece, directLen(4*rndvPiece, 1<<30), "a READ is a piece at most: it bounds a deadline's delay")
}

// A Buffer's Put ends its exposures on a connection and keeps its
// registration there; its Free ends both, and the Buffer forgets the
// connection once it holds none of it.
func TestZeroCopyDropEndsWhatPutAndFreeEnd(t *testing.T) {
	c := new(Conn) // a key only: no verbs
	b, other := new(Buffer), new(Buffer)
	var zc zeroCopy
	reg, exp, otherExp := &fakeMR{}, &fakeMR{}, &fakeMR{}
	zc.Regs.Keep(b, reg)
	zc.exposures.Add(b, exp)
	zc.exposures.Add(other, otherExp)
	b.noteConn(c)

	zc.drop(b, c, true) // BufferPool.Put
	assert.Equal(t, 1, exp.deregs, "Put ends the exposure")
	assert.Zero(t, reg.deregs, "a pooled Buffer keeps its registration for local use")
	assert.Contains(t, b.regs, c, "and the Buffer still knows the connection holds it")

	zc.drop(b, c, false) // Buffer.Free
	assert.Equal(t, 1, reg.deregs, "Free deregisters it")
	assert.Equal(t, 1, exp.deregs, "and deregisters nothing twice")
	assert.NotContains(t, b.regs, c, "the Buffer forgets a connection that holds none of it")
	assert.Zero(t, otherExp.deregs, "another Buffer's exposure stays")

	// An exposure alone keeps the connection known until it ends.
	exp2 := &fakeMR{}
	zc.exposures.Add(b, exp2)
	b.noteConn(c)
	zc.forgetIfUnused(b, c)
	assert.Contains(t, b.regs, c, "an exposure is a hold too")
	zc.drop(b, c, true)
	assert.Equal(t, 1, exp2.deregs)
	assert.NotContains(t, b.regs, c)
}

// fakeMW is a window without a provider, counting its deallocations.
type fakeMW struct{ deallocs int }

func (w *fakeMW) RKey() uint32   { return 0 }
func (w *fakeMW) Dealloc() error { w.deallocs++; return nil }

// deallocOrderMR checks, as it is deregistered, that the window went
// first.
type deallocOrderMR struct {
	fakeMR
	t  *testing.T
	mw *fakeMW
}

func (m *deallocOrderMR) Dereg() error {
	assert.Equal(m.t, 1, m.mw.deallocs, "the window goes before the registrations it may be bound in")
	return m.fakeMR.Dereg()
}

func TestZeroCopyEndRegistrations(t *testing.T) {
	c := new(Conn) // a key only: no verbs
	mw := &fakeMW{}
	var zc zeroCopy
	zc.Window.Allocated(mw)
	b, exposed, held := new(Buffer), new(Buffer), new(Buffer)
	reg := &deallocOrderMR{t: t, mw: mw}
	exp := &deallocOrderMR{t: t, mw: mw}
	zc.Regs.Keep(b, reg)
	zc.exposures.Add(exposed, exp)
	zc.Regs.Hold(held)
	for _, x := range []*Buffer{b, exposed} {
		x.noteConn(c)
	}
	assert.Equal(t, []*Buffer{held}, zc.endRegistrations(c), "the held Buffers go to the caller")
	assert.Equal(t, 1, mw.deallocs)
	assert.Nil(t, zc.Window.MW())
	assert.Equal(t, 1, reg.deregs)
	assert.Equal(t, 1, exp.deregs)
	assert.NotContains(t, b.regs, c, "each Buffer forgets the connection")
	assert.NotContains(t, exposed.regs, c)
	assert.Zero(t, zc.exposures.Live())
	assert.Nil(t, zc.Regs.Lookup(b))
}
