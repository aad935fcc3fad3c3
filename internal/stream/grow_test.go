package stream

import (
	"bytes"
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

// FuzzRingOffer plays a peer's ring offers as the connection takes them
// in (recvLocked): the CtlRing message through Receive, the RingMsg the
// peer wrote into the mailbox through ParseRingMsg, then Send.Offer, with
// data writes and the peer's credit between offers. Nothing panics; an
// offer is taken only on a connection that agreed on moves, with no other
// pending, and for a ring within what the hello announced (MinRingLog to
// GrowLog bytes, at an address that is not 0 and does not wrap with its
// mailbox); a refused one changes nothing; and every write lands inside
// the ring last taken, with the generation of that ring.
//
// The hello comes from ringLog, growLog and version (kept to what
// ParseHello passes); steps is a sequence of: 0 byteLen msg[16] (an offer),
// 1 lo hi (a write of up to lo|hi<<8 bytes), 2 (the peer frees all).
func FuzzRingOffer(f *testing.F) {
	msg := func(m RingMsg) []byte {
		b := make([]byte, RingMsgLen)
		m.Marshal(b)
		return b
	}
	offer := func(byteLen byte, m []byte) []byte { return append([]byte{0, byteLen}, m...) }
	write := func(n uint16) []byte { return []byte{1, byte(n), byte(n >> 8)} }
	steps := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	ok := RingMsg{Addr: 1 << 30, Key: 9, Log: 14}
	reserved := msg(ok)
	reserved[14] = 1
	f.Add(uint8(0), uint8(4), uint8(Version), steps(write(3000), offer(RingMsgLen, msg(ok)), write(1000), write(60000), []byte{2}, write(60000)))
	f.Add(uint8(0), uint8(4), uint8(Version), steps(offer(RingMsgLen, msg(ok)), write(1), offer(RingMsgLen, msg(RingMsg{Addr: 2 << 30, Log: 12})), write(1)))
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen, msg(RingMsg{Addr: 1 << 30, Log: 17})))             // beyond GrowLog
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen, msg(RingMsg{Addr: 1 << 30, Log: MinRingLog - 1}))) // too small
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen, msg(RingMsg{Log: 14})))                            // address 0
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen, msg(RingMsg{Addr: ^uint64(0) - 4096, Log: 14})))   // wraps
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen, reserved))
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen, msg(ok)[:RingMsgLen-1])) // short mailbox
	f.Add(uint8(0), uint8(4), uint8(Version), offer(RingMsgLen-1, msg(ok)))              // wrong byte length
	f.Add(uint8(0), uint8(4), uint8(Version), steps(offer(RingMsgLen, msg(ok)), offer(RingMsgLen, msg(ok))))
	f.Add(uint8(0), uint8(4), uint8(VersionHeartbeat), offer(RingMsgLen, msg(ok))) // no moves agreed
	f.Add(uint8(18), uint8(0), uint8(Version), offer(RingMsgLen, msg(RingMsg{Addr: 1 << 40, Log: MaxRingLog})))
	f.Fuzz(func(t *testing.T, ringLog, growLog, version uint8, steps []byte) {
		h := Hello{Version: Version, RecvDepth: 8, RingAddr: 1 << 20, RingKey: 7,
			RingLog: MinRingLog + ringLog%(MaxRingLog-MinRingLog+1)}
		h.GrowLog = h.RingLog + growLog%(MaxRingLog-h.RingLog+1)
		if _, err := ParseHello(h.Marshal()); err != nil {
			t.Fatalf("the test's hello %+v: %v", h, err)
		}
		agreed := 1 + version%Version
		s := NewSend(h, agreed)
		if s.Grows != (agreed >= VersionGrow) || s.GrowLog > MaxRingLog || s.GrowLog < h.RingLog {
			t.Fatalf("window %+v from hello %+v at version %d", s, h, agreed)
		}
		// The ring writes go to, as the test sees it.
		ring, gen := RingMsg{Addr: h.RingAddr, Key: h.RingKey, Log: h.RingLog}, uint32(0)
		for len(steps) > 0 {
			op := steps[0]
			steps = steps[1:]
			switch op % 3 {
			case 0:
				if len(steps) == 0 {
					return
				}
				byteLen := uint32(steps[0])
				n := min(len(steps)-1, RingMsgLen)
				box := steps[1 : 1+n]
				steps = steps[1+n:]
				s0 := s
				var back Recv
				k, err := Receive(&back, &s, ImmCtl(CtlRing), byteLen)
				if k != KindRing {
					t.Fatalf("CtlRing taken for kind %d", k)
				}
				m, perr := ParseRingMsg(box)
				if perr == nil {
					var again [RingMsgLen]byte
					m.Marshal(again[:])
					if len(box) < RingMsgLen || !bytes.Equal(again[:], box[:RingMsgLen]) {
						t.Fatalf("mailbox %x parsed as %+v", box, m)
					}
				} else if len(box) >= RingMsgLen && box[13]|box[14]|box[15] == 0 {
					t.Fatalf("well-formed mailbox %x refused: %v", box, perr)
				}
				if err != nil {
					if s != s0 {
						t.Fatalf("refused CtlRing changed the window: %+v, was %+v", s, s0)
					}
					if s.Grows && s.Next.Log == 0 && byteLen == RingMsgLen {
						t.Fatalf("well-formed CtlRing refused: %v", err)
					}
					// Offer holds to the same rules on its own.
					if perr == nil && (!s.Grows || s.Next.Log != 0) && s.Offer(m) == nil {
						t.Fatalf("offer %+v taken on window %+v", m, s0)
					}
					return // the connection fails
				}
				if perr != nil {
					return // the connection fails
				}
				pending := s.Next.Log != 0
				err = s.Offer(m)
				within := m.Log >= MinRingLog && m.Log <= h.GrowLog && m.Addr != 0 &&
					m.Addr+(1<<m.Log)+MailboxLen > m.Addr
				if err != nil {
					if s != s0 {
						t.Fatalf("refused offer %+v changed the window: %+v, was %+v", m, s, s0)
					}
					if within && !pending {
						t.Fatalf("offer %+v within the hello's bounds (%+v) refused: %v", m, h, err)
					}
					return // the connection fails
				}
				if !within || pending || !s.Grows {
					t.Fatalf("offer %+v taken: hello %+v, window was %+v", m, h, s0)
				}
				if s.Next != m {
					t.Fatalf("offer %+v taken as %+v", m, s.Next)
				}
				if free, toEnd := s.Room(); free != 1<<m.Log || toEnd != free {
					t.Fatalf("room %d, %d in an offered ring of %d", free, toEnd, uint64(1)<<m.Log)
				}
			case 1:
				if len(steps) < 2 {
					return
				}
				want := uint64(steps[0]) | uint64(steps[1])<<8
				steps = steps[2:]
				free, toEnd := s.Room()
				if s.Next.Log == 0 && (free > s.Size || toEnd > s.Size || toEnd == 0) {
					t.Fatalf("room %d, %d in a ring of %d", free, toEnd, s.Size)
				}
				n := min(want, free, toEnd)
				if n == 0 || s.Credits == 0 {
					continue
				}
				next := s.Next
				at, moved := s.Reserve(n)
				if moved != (next.Log != 0) {
					t.Fatalf("moved %v with %+v offered", moved, next)
				}
				if moved {
					ring, gen = next, gen^ImmDataGen
					if s.Addr != next.Addr || s.RKey != next.Key || s.Size != 1<<next.Log || s.Next.Log != 0 {
						t.Fatalf("moved to %+v, window %+v", next, s)
					}
				}
				if at < ring.Addr || at+n > ring.Addr+1<<ring.Log {
					t.Fatalf("write of %d at %#x outside the ring %+v", n, at, ring)
				}
				if imm := s.ImmData(int(n)); imm != uint32(n)|gen {
					t.Fatalf("immediate %#x for %d bytes of generation %#x", imm, n, gen)
				}
			case 2:
				s.Acked, s.Credits = s.Tail, s.Depth
			}
		}
	})
}
