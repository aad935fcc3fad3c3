package rdma

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/onesided"
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

func TestBufferRegsKeepsTheFirstRegistration(t *testing.T) {
	var r bufferRegs
	b := new(Buffer)
	first, second := &fakeMR{rkey: 1}, &fakeMR{rkey: 2}
	assert.Nil(t, r.lookup(b), "nothing registered yet")
	assert.Same(t, first, r.keep(b, first))
	// A concurrent first use that registered second: the first stays,
	// and the caller (regMR) deregisters second.
	assert.Same(t, first, r.keep(b, second), "the registration made first is the one used")
	assert.Same(t, first, r.lookup(b))
	assert.Zero(t, first.deregs+second.deregs, "keep deregisters nothing")
}

func TestBufferRegsDrop(t *testing.T) {
	var r bufferRegs
	b, other := new(Buffer), new(Buffer)
	mr, otherMR := &fakeMR{}, &fakeMR{}
	r.keep(b, mr)
	r.keep(other, otherMR)
	require.True(t, r.drop(b))
	assert.Equal(t, 1, mr.deregs, "dropped and deregistered")
	assert.Nil(t, r.lookup(b))
	assert.False(t, r.drop(b), "dropping twice finds nothing")
	assert.Equal(t, 1, mr.deregs, "and deregisters nothing twice")
	assert.Same(t, otherMR, r.lookup(other), "another Buffer's registration stays")
	assert.Zero(t, otherMR.deregs)
}

func TestBufferRegsRelease(t *testing.T) {
	var r bufferRegs
	bufs := []*Buffer{new(Buffer), new(Buffer)}
	mrs := map[*Buffer]*fakeMR{}
	for _, b := range bufs {
		mrs[b] = &fakeMR{}
		r.keep(b, mrs[b])
	}
	heldBuf := new(Buffer)
	r.hold(heldBuf)
	forgot := map[*Buffer]bool{}
	held := r.release(func(b *Buffer) {
		// Forgotten before its registration goes, as under mu a Free
		// beside then either ends it itself or finds it gone.
		assert.Zero(t, mrs[b].deregs, "forget comes before the Dereg")
		forgot[b] = true
	})
	assert.Equal(t, []*Buffer{heldBuf}, held, "the held Buffers go back to the caller")
	for _, b := range bufs {
		assert.True(t, forgot[b])
		assert.Equal(t, 1, mrs[b].deregs)
		assert.Nil(t, r.lookup(b))
	}
	assert.False(t, forgot[heldBuf], "a held Buffer is not a registration")
	assert.Empty(t, r.release(func(*Buffer) { t.Error("nothing left to forget") }), "the table is empty afterwards")
}

// descOf is the Desc of exposure id registered as mr.
func descOf(id uint32, mr *fakeMR) onesided.Desc {
	return onesided.Desc{Access: onesided.AccessRead, Addr: mr.addr, Len: uint64(mr.n), RKey: mr.rkey, ID: id}
}

func TestExposureTableNumbers(t *testing.T) {
	var x exposureTable
	b := new(Buffer)
	first := x.add(b, &fakeMR{})
	assert.Equal(t, uint32(1), first, "numbers start at 1: 0 names no exposure")
	assert.Equal(t, uint32(2), x.add(b, &fakeMR{}))
	// At the wrap: 0 is skipped, and so are the numbers still live.
	x.last = math.MaxUint32 - 1
	assert.Equal(t, uint32(math.MaxUint32), x.add(b, &fakeMR{}))
	assert.Equal(t, uint32(3), x.add(b, &fakeMR{}), "past 0 and the live 1 and 2")
	assert.Equal(t, 4, x.live())
}

func TestExposureTableTakesOnlyALiveMatch(t *testing.T) {
	var x exposureTable
	b := new(Buffer)
	mr := &fakeMR{addr: 0x1000, n: 64, rkey: 0x42}
	id := x.add(b, mr)
	d := descOf(id, mr)
	stale := []onesided.Desc{d, d, d, d}
	stale[0].ID++      // another number
	stale[1].RKey++    // a reused number's earlier registration
	stale[2].Addr += 8 // another range
	stale[3].Len--     // a range of another length
	for i, s := range stale {
		_, ok := x.take(s)
		assert.False(t, ok, "stale Desc %d", i)
	}
	assert.Equal(t, 1, x.live(), "a stale Desc removes nothing")
	e, ok := x.take(d)
	require.True(t, ok)
	assert.Same(t, b, e.buf)
	assert.Same(t, mr, e.mr.(*fakeMR))
	assert.Zero(t, mr.deregs, "the caller deregisters what take returns")
	_, ok = x.take(d)
	assert.False(t, ok, "taken once only")
	assert.Zero(t, x.live())
	assert.False(t, x.holds(b))
}

func TestExposureTableEndFor(t *testing.T) {
	var x exposureTable
	b, other := new(Buffer), new(Buffer)
	mine := []*fakeMR{{rkey: 1}, {rkey: 2}}
	for _, mr := range mine {
		x.add(b, mr)
	}
	theirs := &fakeMR{rkey: 3}
	x.add(other, theirs)
	require.True(t, x.holds(b))
	x.endFor(b)
	for _, mr := range mine {
		assert.Equal(t, 1, mr.deregs, "each exposure of b ends")
	}
	assert.False(t, x.holds(b))
	assert.True(t, x.holds(other), "another Buffer's exposure stays")
	assert.Zero(t, theirs.deregs)
	assert.Equal(t, 1, x.live())
}

func TestExposureTableRelease(t *testing.T) {
	var x exposureTable
	bufs := []*Buffer{new(Buffer), new(Buffer)}
	mrs := []*fakeMR{{}, {}}
	for i, b := range bufs {
		x.add(b, mrs[i])
	}
	var forgot []*Buffer
	x.release(func(b *Buffer) {
		for _, mr := range mrs {
			assert.Equal(t, 1, mr.deregs, "every exposure is deregistered before its Buffer is forgotten")
		}
		forgot = append(forgot, b)
	})
	assert.ElementsMatch(t, bufs, forgot)
	assert.Zero(t, x.live())
	assert.False(t, x.holds(bufs[0]))
}

func TestBounceBuffer(t *testing.T) {
	bb := bounceBuffer{blk: block{buf: []byte("0123456789")}}
	assert.False(t, bb.pending(), "empty at first")
	assert.Len(t, bb.space(1<<20), 10, "a READ fills at most the whole buffer")
	dst := bb.space(6)
	require.Len(t, dst, 6, "or the rendezvous' bytes left, when fewer")
	// A Read took 2 of the 6 bytes that landed at once.
	bb.landed(2, len(dst))
	require.True(t, bb.pending())
	assert.Equal(t, []byte("2345"), bb.unread())
	p := make([]byte, 3)
	assert.Equal(t, 3, bb.read(p))
	assert.Equal(t, []byte("234"), p)
	assert.Equal(t, []byte("5"), bb.unread())
	bb.consumed(1)
	assert.False(t, bb.pending(), "every byte that landed was read, none twice")
	assert.Zero(t, bb.read(p))
}

func TestWindowMode(t *testing.T) {
	hasMW := verbs.DeviceAttr{MaxMW: 8, VendorID: 0x02c9}
	rxe := verbs.DeviceAttr{MaxMW: 8, VendorID: rxeVendorID}
	for _, tc := range []struct {
		name string
		attr verbs.DeviceAttr
		err  error
		env  string
		want windowMode
	}{
		{"device with windows", hasMW, nil, "", windowsChecked},
		{"asked for", hasMW, nil, "1", windowsChecked},
		{"turned off", hasMW, nil, "0", windowsNone},
		{"no windows", verbs.DeviceAttr{VendorID: 0x02c9}, nil, "1", windowsNone},
		{"device not asked", hasMW, errors.New("no device"), "", windowsNone},
		{"rxe by default", rxe, nil, "", windowsNone},
		{"rxe asked for", rxe, nil, "1", windowsWholeOnly},
		{"rxe turned off", rxe, nil, "0", windowsNone},
	} {
		assert.Equal(t, tc.want, modeFor(tc.attr, tc.err, tc.env), tc.name)
	}
	testNoWindows = true
	defer func() { testNoWindows = false }()
	assert.Equal(t, windowsNone, modeFor(hasMW, nil, "1"), "the tests' switch")
}

func TestWindowFits(t *testing.T) {
	buf := &Buffer{buf: make([]byte, 64)}
	whole, part := buf.buf, buf.buf[8:16]
	for _, tc := range []struct {
		mode        windowMode
		whole, part bool
	}{
		{windowsUnknown, false, false},
		{windowsNone, false, false},
		{windowsChecked, true, true},
		{windowsWholeOnly, true, false}, // the region's range would be exposed
	} {
		w := rndvWindow{mode: tc.mode}
		assert.Equal(t, tc.whole, w.fits(whole, buf), "mode %d, the whole Buffer", tc.mode)
		assert.Equal(t, tc.part, w.fits(part, buf), "mode %d, part of it", tc.mode)
	}
}

// bindTarget is what TestWindowBindsUnderANewRKey binds: not on a stack,
// which may move.
var bindTarget [32]byte

func TestWindowBindsUnderANewRKey(t *testing.T) {
	w := rndvWindow{mode: windowsChecked, key: 0x1234ff}
	mr := &fakeMR{}
	p := bindTarget[:]
	seen := map[uint32]bool{w.key: true}
	for range 300 {
		bind, key := w.nextBind(nil, mr, p)
		require.False(t, seen[key], "rkey %#x reused while its window may still be bound", key)
		if len(seen) == 255 {
			seen = map[uint32]bool{} // the key byte wraps after 256 binds
		}
		seen[key] = true
		assert.Equal(t, key, bind.RKey)
		assert.Equal(t, key&^0xff, uint32(0x123400), "only the key byte changes")
		assert.Equal(t, verbs.AddrOf(p), bind.Addr)
		assert.Equal(t, uint64(len(p)), bind.Length)
		assert.Equal(t, verbs.AccessRemoteRead, bind.Access, "read-only: the rendezvous reader READs")
		assert.Same(t, mr, bind.MR.(*fakeMR))
	}
}

func TestRndvExposureAnnounce(t *testing.T) {
	p := bindTarget[:]
	mr := &fakeMR{rkey: 0x77}
	reg := rndvExposure{mr: mr}
	bind, key := reg.announce(&rndvWindow{}, p)
	assert.Nil(t, bind, "a registration of its own needs no bind")
	assert.Equal(t, uint32(0x77), key, "its rkey is announced")
	assert.Equal(t, key, reg.key)

	w := rndvWindow{mode: windowsChecked, key: 0x500}
	bufMR := &fakeMR{}
	win := rndvExposure{mw: struct{ verbs.MW }{}, bufMR: bufMR}
	bind, key = win.announce(&w, p)
	require.NotNil(t, bind, "a window is bound before the descriptor goes")
	assert.Equal(t, uint32(0x501), key, "under a new rkey")
	assert.Equal(t, key, win.key)
	assert.True(t, win.windowBound)
	assert.Same(t, bufMR, bind.MR.(*fakeMR), "in the Buffer's registration")
	assert.Equal(t, win.mw, bind.MW)
}

func TestRndvExposureRevocation(t *testing.T) {
	reg := rndvExposure{mr: &fakeMR{}}
	unbound := rndvExposure{mw: struct{ verbs.MW }{}, bufMR: &fakeMR{}}
	bound := unbound
	bound.windowBound = true
	for _, tc := range []struct {
		name   string
		x      rndvExposure
		gaveUp bool
		want   revocation
	}{
		{"registration, done", reg, false, revokeDereg},
		{"registration, gave up", reg, true, revokeDereg},
		{"window never bound", unbound, true, revokeNothing},
		{"window, done", bound, false, revokeInvalidate},
		// The peer may be mid-READ and the queue pair failing: an
		// invalidation might never complete.
		{"window, gave up", bound, true, revokeDealloc},
	} {
		assert.Equal(t, tc.want, tc.x.revocation(tc.gaveUp), tc.name)
	}
}

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
		{"soft's default", 0, true, stream.VersionRndv, softRndvThreshold},
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
	zc.regs.keep(b, reg)
	zc.exposures.add(b, exp)
	zc.exposures.add(other, otherExp)
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
	zc.exposures.add(b, exp2)
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
	zc.window.mw = mw
	b, exposed, held := new(Buffer), new(Buffer), new(Buffer)
	reg := &deallocOrderMR{t: t, mw: mw}
	exp := &deallocOrderMR{t: t, mw: mw}
	zc.regs.keep(b, reg)
	zc.exposures.add(exposed, exp)
	zc.regs.hold(held)
	for _, x := range []*Buffer{b, exposed} {
		x.noteConn(c)
	}
	assert.Equal(t, []*Buffer{held}, zc.endRegistrations(c), "the held Buffers go to the caller")
	assert.Equal(t, 1, mw.deallocs)
	assert.Nil(t, zc.window.mw)
	assert.Equal(t, 1, reg.deregs)
	assert.Equal(t, 1, exp.deregs)
	assert.NotContains(t, b.regs, c, "each Buffer forgets the connection")
	assert.NotContains(t, exposed.regs, c)
	assert.Zero(t, zc.exposures.live())
	assert.Nil(t, zc.regs.lookup(b))
}
