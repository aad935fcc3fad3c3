package zerocopy

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/regmem"
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

func TestBufferRegsKeepsTheFirstRegistration(t *testing.T) {
	var r Regs[*buffer]
	b := new(buffer)
	first, second := &fakeMR{rkey: 1}, &fakeMR{rkey: 2}
	assert.Nil(t, r.Lookup(b), "nothing registered yet")
	assert.Same(t, first, r.Keep(b, first))
	// A concurrent first use that registered second: the first stays,
	// and the caller (regMR) deregisters second.
	assert.Same(t, first, r.Keep(b, second), "the registration made first is the one used")
	assert.Same(t, first, r.Lookup(b))
	assert.Zero(t, first.deregs+second.deregs, "keep deregisters nothing")
}

func TestBufferRegsDrop(t *testing.T) {
	var r Regs[*buffer]
	b, other := new(buffer), new(buffer)
	mr, otherMR := &fakeMR{}, &fakeMR{}
	r.Keep(b, mr)
	r.Keep(other, otherMR)
	require.True(t, r.Drop(b))
	assert.Equal(t, 1, mr.deregs, "dropped and deregistered")
	assert.Nil(t, r.Lookup(b))
	assert.False(t, r.Drop(b), "dropping twice finds nothing")
	assert.Equal(t, 1, mr.deregs, "and deregisters nothing twice")
	assert.Same(t, otherMR, r.Lookup(other), "another Buffer's registration stays")
	assert.Zero(t, otherMR.deregs)
}

func TestBufferRegsRelease(t *testing.T) {
	var r Regs[*buffer]
	bufs := []*buffer{new(buffer), new(buffer)}
	mrs := map[*buffer]*fakeMR{}
	for _, b := range bufs {
		mrs[b] = &fakeMR{}
		r.Keep(b, mrs[b])
	}
	heldBuf := new(buffer)
	r.Hold(heldBuf)
	forgot := map[*buffer]bool{}
	held := r.Release(func(b *buffer) {
		// Forgotten before its registration goes, as under mu a Free
		// beside then either ends it itself or finds it gone.
		assert.Zero(t, mrs[b].deregs, "forget comes before the Dereg")
		forgot[b] = true
	})
	assert.Equal(t, []*buffer{heldBuf}, held, "the held Buffers go back to the caller")
	for _, b := range bufs {
		assert.True(t, forgot[b])
		assert.Equal(t, 1, mrs[b].deregs)
		assert.Nil(t, r.Lookup(b))
	}
	assert.False(t, forgot[heldBuf], "a held Buffer is not a registration")
	assert.Empty(t, r.Release(func(*buffer) { t.Error("nothing left to forget") }), "the table is empty afterwards")
}

func TestBounceBuffer(t *testing.T) {
	bb := Bounce{blk: regmem.Block{Buf: []byte("0123456789")}}
	assert.False(t, bb.Pending(), "empty at first")
	assert.Len(t, bb.Space(1<<20), 10, "a READ fills at most the whole buffer")
	dst := bb.Space(6)
	require.Len(t, dst, 6, "or the rendezvous' bytes left, when fewer")
	// A Read took 2 of the 6 bytes that landed at once.
	bb.Landed(2, len(dst))
	require.True(t, bb.Pending())
	assert.Equal(t, []byte("2345"), bb.Unread())
	p := make([]byte, 3)
	assert.Equal(t, 3, bb.Read(p))
	assert.Equal(t, []byte("234"), p)
	assert.Equal(t, []byte("5"), bb.Unread())
	bb.Consumed(1)
	assert.False(t, bb.Pending(), "every byte that landed was read, none twice")
	assert.Zero(t, bb.Read(p))
}

func TestWindowMode(t *testing.T) {
	hasMW := verbs.DeviceAttr{MaxMW: 8, VendorID: 0x02c9}
	rxe := verbs.DeviceAttr{MaxMW: 8, VendorID: RxeVendorID}
	for _, tc := range []struct {
		name string
		attr verbs.DeviceAttr
		err  error
		env  string
		want WindowMode
	}{
		{"device with windows", hasMW, nil, "", WindowsChecked},
		{"asked for", hasMW, nil, "1", WindowsChecked},
		{"turned off", hasMW, nil, "0", WindowsNone},
		{"no windows", verbs.DeviceAttr{VendorID: 0x02c9}, nil, "1", WindowsNone},
		{"device not asked", hasMW, errors.New("no device"), "", WindowsNone},
		{"rxe by default", rxe, nil, "", WindowsNone},
		{"rxe asked for", rxe, nil, "1", WindowsWholeOnly},
		{"rxe turned off", rxe, nil, "0", WindowsNone},
	} {
		assert.Equal(t, tc.want, ModeFor(tc.attr, tc.err, tc.env), tc.name)
	}
}

func TestWindowFits(t *testing.T) {
	buf := make([]byte, 64)
	whole, part := buf, buf[8:16]
	for _, tc := range []struct {
		mode        WindowMode
		whole, part bool
	}{
		{WindowsUnknown, false, false},
		{WindowsNone, false, false},
		{WindowsChecked, true, true},
		{WindowsWholeOnly, true, false}, // the region's range would be exposed
	} {
		w := Window{mode: tc.mode}
		assert.Equal(t, tc.whole, w.Fits(whole, len(buf)), "mode %d, the whole Buffer", tc.mode)
		assert.Equal(t, tc.part, w.Fits(part, len(buf)), "mode %d, part of it", tc.mode)
	}
}

// bindTarget is what TestWindowBindsUnderANewRKey binds: not on a stack,
// which may move.
var bindTarget [32]byte

func TestWindowBindsUnderANewRKey(t *testing.T) {
	w := Window{mode: WindowsChecked, key: 0x1234ff}
	mr := &fakeMR{}
	p := bindTarget[:]
	seen := map[uint32]bool{w.key: true}
	for range 300 {
		bind, key := w.NextBind(nil, mr, p)
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
	reg := RndvExposure{MR: mr}
	bind, key := reg.Announce(&Window{}, p)
	assert.Nil(t, bind, "a registration of its own needs no bind")
	assert.Equal(t, uint32(0x77), key, "its rkey is announced")
	assert.Equal(t, key, reg.Key)

	w := Window{mode: WindowsChecked, key: 0x500}
	bufMR := &fakeMR{}
	win := RndvExposure{MW: struct{ verbs.MW }{}, BufMR: bufMR}
	bind, key = win.Announce(&w, p)
	require.NotNil(t, bind, "a window is bound before the descriptor goes")
	assert.Equal(t, uint32(0x501), key, "under a new rkey")
	assert.Equal(t, key, win.Key)
	assert.True(t, win.windowBound)
	assert.Same(t, bufMR, bind.MR.(*fakeMR), "in the Buffer's registration")
	assert.Equal(t, win.MW, bind.MW)
}

func TestRndvExposureRevocation(t *testing.T) {
	reg := RndvExposure{MR: &fakeMR{}}
	unbound := RndvExposure{MW: struct{ verbs.MW }{}, BufMR: &fakeMR{}}
	bound := unbound
	bound.windowBound = true
	for _, tc := range []struct {
		name   string
		x      RndvExposure
		gaveUp bool
		want   Revocation
	}{
		{"registration, done", reg, false, RevokeDereg},
		{"registration, gave up", reg, true, RevokeDereg},
		{"window never bound", unbound, true, RevokeNothing},
		{"window, done", bound, false, RevokeInvalidate},
		// The peer may be mid-READ and the queue pair failing: an
		// invalidation might never complete.
		{"window, gave up", bound, true, RevokeDealloc},
	} {
		assert.Equal(t, tc.want, tc.x.Revocation(tc.gaveUp), tc.name)
	}
}
