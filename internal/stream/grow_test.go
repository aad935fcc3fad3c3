package stream

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// growPair is both directions of a connection whose rings start at 4 KiB
// and may grow to 64 KiB: a's Send window toward b, b's Recv window, and
// b's Send window back (where b's offers arrive, seen from a: back is a's
// view of b's ring, unused but for the offer's checks).
func growPair(t *testing.T) (out Send, in Recv) {
	in = NewRecv(12, 16, 8)
	in.Agree(Version)
	out = NewSend(Hello{Version: Version, RecvDepth: 8, RingAddr: 1 << 20, RingKey: 7, RingLog: 12, GrowLog: 16}, Version)
	require.True(t, out.Grows)
	require.Equal(t, in.Shift, out.Shift, "both count credits in the largest ring's unit")
	return out, in
}

// offer plays the receiver's offer of a ring at addr: the RingMsg through
// the wire format, the CtlRing message through Receive.
func offer(t *testing.T, out *Send, in *Recv, addr uint64, log uint8) {
	t.Helper()
	require.True(t, in.CanOffer(log))
	in.Offer(log)
	var box [MailboxLen]byte
	RingMsg{Addr: addr, Key: 9, Log: log}.Marshal(box[:])
	var back Recv
	k, err := Receive(&back, out, ImmCtl(CtlRing), RingMsgLen)
	require.NoError(t, err)
	require.Equal(t, KindRing, k)
	m, err := ParseRingMsg(box[:])
	require.NoError(t, err)
	require.NoError(t, out.Offer(m))
}

func TestRingMove(t *testing.T) {
	out, in := growPair(t)
	var back Send
	// 3000 bytes into the first ring, unread.
	at, moved := out.Reserve(3000)
	assert.Equal(t, uint64(1<<20), at)
	assert.False(t, moved)
	k, err := Receive(&in, &back, out.ImmData(3000), 3000)
	require.NoError(t, err)
	require.Equal(t, KindData, k)

	offer(t, &out, &in, 2<<20, 16)
	assert.False(t, in.CanOffer(16), "one move at a time")
	free, toEnd := out.Room()
	assert.Equal(t, uint64(1<<16), free, "the offered ring is empty")
	assert.Equal(t, uint64(1<<16), toEnd)

	// The next write goes to the new ring's start, with the flipped
	// generation; the receiver learns there where the old ring ends.
	at, moved = out.Reserve(1000)
	assert.Equal(t, uint64(2<<20), at)
	assert.True(t, moved)
	imm := out.ImmData(1000)
	assert.Equal(t, uint32(ImmDataGen|1000), imm)
	k, err = Receive(&in, &back, imm, 1000)
	require.NoError(t, err)
	require.Equal(t, KindDataMoved, k)
	assert.Equal(t, uint64(1<<16), in.Size)
	assert.Equal(t, uint64(4000), in.Buffered())

	// The reader reads the old ring to its end, then the new one.
	off, n, prev := in.Readable()
	assert.Equal(t, [3]any{uint64(0), uint64(3000), true}, [3]any{off, n, prev})
	in.Consume(2000)
	off, n, prev = in.Readable()
	assert.Equal(t, [3]any{uint64(2000), uint64(1000), true}, [3]any{off, n, prev})
	assert.False(t, in.CanOffer(14), "not while the old ring is read")
	in.Consume(1000)
	assert.False(t, in.InPrev())
	off, n, prev = in.Readable()
	assert.Equal(t, [3]any{uint64(0), uint64(1000), false}, [3]any{off, n, prev})
	in.Consume(1000)

	// Credit for both rings' bytes comes back in one unit.
	in.Owed = 2
	recvs, units, due := in.CreditDue(true)
	require.True(t, due)
	in.Credit(recvs, units)
	var back2 Recv
	_, err = Receive(&back2, &out, ImmCredit(recvs, units), 0)
	require.NoError(t, err)
	free, _ = out.Room()
	assert.Equal(t, uint64(1<<16), free)

	// Writes go on in the new ring; a write with the old generation
	// now is into a ring not offered.
	at, _ = out.Reserve(500)
	assert.Equal(t, uint64(2<<20+1000), at)
	_, err = Receive(&in, &back, ImmData(500), 500)
	assert.ErrorIs(t, err, ErrRingNotOffer)
	k, err = Receive(&in, &back, out.ImmData(500), 500)
	require.NoError(t, err)
	assert.Equal(t, KindData, k)

	// A move back to a small ring works the same way.
	in.Consume(500)
	offer(t, &out, &in, 3<<20, 12)
	at, moved = out.Reserve(100)
	assert.Equal(t, [2]any{uint64(3 << 20), true}, [2]any{at, moved})
	assert.Equal(t, uint32(100), out.ImmData(100), "the generation flips back")
}

// The window before a move still bounds what lands in the old ring, and
// the new one bounds what lands in it from the move on: bytes the reader
// has not freed in the old ring do not count against the new one.
func TestRingMoveWindow(t *testing.T) {
	out, in := growPair(t)
	var back Send
	for range 4 {
		out.Reserve(1024)
		_, err := Receive(&in, &back, out.ImmData(1024), 1024)
		require.NoError(t, err)
	}
	free, _ := out.Room()
	require.Zero(t, free, "the first ring is full")
	offer(t, &out, &in, 2<<20, 13)
	free, _ = out.Room()
	assert.Equal(t, uint64(8192), free)
	out.Reserve(8192)
	k, err := Receive(&in, &back, out.ImmData(8192), 8192)
	require.NoError(t, err)
	assert.Equal(t, KindDataMoved, k)
	free, _ = out.Room()
	assert.Zero(t, free)
	_, err = Receive(&in, &back, out.ImmData(1), 1)
	assert.ErrorIs(t, err, ErrBeyondWindow)
}

func TestRingOfferRejects(t *testing.T) {
	cases := map[string]RingMsg{
		"too small":     {Addr: 1 << 20, Log: MinRingLog - 1},
		"beyond grow":   {Addr: 1 << 20, Log: 17},
		"address 0":     {Log: 14},
		"address wraps": {Addr: ^uint64(0) - 4096, Log: 14},
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			out, _ := growPair(t)
			out0 := out
			assert.ErrorIs(t, out.Offer(m), ErrRingMsg)
			assert.Equal(t, out0, out)
		})
	}
	box := make([]byte, MailboxLen)
	RingMsg{Addr: 1, Log: 14}.Marshal(box)
	box[15] = 1
	_, err := ParseRingMsg(box)
	assert.ErrorIs(t, err, ErrRingMsg, "reserved bytes set")
	_, err = ParseRingMsg(box[:RingMsgLen-1])
	assert.ErrorIs(t, err, ErrRingMsg, "short")

	// On a connection of version 2 neither side moves.
	in := NewRecv(12, 16, 8)
	in.Agree(2)
	assert.False(t, in.CanOffer(16))
	assert.Equal(t, CreditShift(12), in.Shift, "credits in the ring's own unit")
	out := NewSend(Hello{Version: Version, RecvDepth: 8, RingAddr: 1 << 20, RingLog: 12, GrowLog: 16}, 2)
	assert.False(t, out.Grows)
	assert.ErrorIs(t, out.Offer(RingMsg{Addr: 1 << 20, Log: 14}), ErrRingVersion)
}
