package stream

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rndvPair is a writer's Send window and its reader's Recv window on a
// connection of version 4, and the writer's view back (where done
// messages arrive).
func rndvPair() (out Send, in Recv) {
	out, in = pair(MinRingLog, 16)
	AgreeRndv(&in, &out, Version)
	return out, in
}

// sendRndv plays a writer's descriptor of m through the wire format and
// Receive, as the reader's completion handling does.
func sendRndv(t *testing.T, out *Send, in *Recv, m RndvMsg) {
	t.Helper()
	var box [MailboxLen]byte
	m.Marshal(box[RndvMsgAt:])
	out.RndvSent()
	k, err := Receive(in, &Send{}, ImmCtl(CtlRndv), RndvMsgLen)
	require.NoError(t, err)
	require.Equal(t, KindRndv, k)
	require.NoError(t, in.TakeRndv(box[RndvMsgAt:]))
}

func TestRndvGolden(t *testing.T) {
	var b [RndvMsgLen]byte
	RndvMsg{Addr: 0x7f0000001000, Len: 0x100000, Key: 0x1234}.Marshal(b[:])
	assert.Equal(t, []byte{0, 0x10, 0, 0, 0, 0x7f, 0, 0, 0, 0, 0x10, 0, 0x34, 0x12, 0, 0}, b[:])
	m, err := ParseRndvMsg(b[:])
	require.NoError(t, err)
	assert.Equal(t, RndvMsg{Addr: 0x7f0000001000, Len: 0x100000, Key: 0x1234}, m)
	assert.Equal(t, uint32(2<<30|5), ImmCtl(CtlRndv))
	assert.Equal(t, uint32(2<<30|6), ImmCtl(CtlRndvDone))
	assert.Less(t, RndvMsgAt+RndvMsgLen, MailboxLen+1, "the descriptor fits the mailbox beside a ring offer")
	assert.GreaterOrEqual(t, RndvMsgAt, RingMsgLen)
}

// A rendezvous in order: ring bytes before it are read first, then its
// range in pieces, then the done message frees the writer; data follows.
func TestRndvFlow(t *testing.T) {
	out, in := rndvPair()
	// 100 ring bytes, then the descriptor.
	_, err := Receive(&in, &out, ImmData(100), 100)
	require.NoError(t, err)
	sendRndv(t, &out, &in, RndvMsg{Addr: 0x10000, Len: 5000, Key: 3})
	_, _, left := in.RndvNext()
	assert.Zero(t, left, "ring bytes come first")
	in.Consume(100)
	addr, key, left := in.RndvNext()
	assert.Equal(t, []uint64{0x10000, 3, 5000}, []uint64{addr, uint64(key), left})
	assert.False(t, in.RndvRead(4000))
	addr, _, left = in.RndvNext()
	assert.Equal(t, []uint64{0x10000 + 4000, 1000}, []uint64{addr, left})
	assert.True(t, in.RndvRead(1000))
	_, _, left = in.RndvNext()
	assert.Zero(t, left)

	k, err := Receive(&Recv{}, &out, ImmCtl(CtlRndvDone), 0)
	require.NoError(t, err)
	assert.Equal(t, KindRndvDone, k)
	assert.False(t, out.Rndv.Out)
	_, err = Receive(&in, &out, ImmData(10), 10)
	require.NoError(t, err, "data after the rendezvous")
}

func TestRndvRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		imm     uint32
		byteLen uint32
		setup   func(in *Recv, out *Send)
		want    error
	}{
		{"descriptor on version 3", ImmCtl(CtlRndv), RndvMsgLen, func(in *Recv, _ *Send) { in.Rndv.Agreed = false }, ErrRndvVersion},
		{"done on version 3", ImmCtl(CtlRndvDone), 0, func(_ *Recv, out *Send) { out.Rndv = RndvOut{Out: true} }, ErrRndvVersion},
		{"descriptor without its message", ImmCtl(CtlRndv), 0, nil, ErrRndvMsg},
		{"descriptor stretched", ImmCtl(CtlRndv), RndvMsgLen + 1, nil, ErrRndvMsg},
		{"descriptor replayed while pending", ImmCtl(CtlRndv), RndvMsgLen, func(in *Recv, _ *Send) { in.Rndv.Pending = true }, ErrRndvRepeat},
		{"descriptor after FIN", ImmCtl(CtlRndv), RndvMsgLen, func(in *Recv, _ *Send) { in.FinRcvd = true }, ErrDataAfterFin},
		{"data while pending", ImmData(10), 10, func(in *Recv, _ *Send) { in.Rndv.Pending = true }, ErrRndvPending},
		{"FIN while pending", ImmCtl(CtlFin), 0, func(in *Recv, _ *Send) { in.Rndv.Pending = true }, ErrRndvPending},
		{"done without a descriptor", ImmCtl(CtlRndvDone), 0, nil, ErrRndvDone},
		{"done with bytes", ImmCtl(CtlRndvDone), 4, func(_ *Recv, out *Send) { out.Rndv.Out = true }, ErrRndvDone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in := rndvPair()
			out.Tail = 100
			if tc.setup != nil {
				tc.setup(&in, &out)
			}
			in0, out0 := in, out
			_, err := Receive(&in, &out, tc.imm, tc.byteLen)
			assert.ErrorIs(t, err, tc.want)
			assert.Equal(t, in0, in, "a rejected message leaves the windows as they were")
			assert.Equal(t, out0, out)
		})
	}

	// Descriptors malformed in their bytes.
	for _, tc := range []struct {
		name string
		m    RndvMsg
	}{
		{"null address", RndvMsg{Len: 10, Key: 1}},
		{"empty", RndvMsg{Addr: 0x1000, Key: 1}},
		{"longer than a rendezvous", RndvMsg{Addr: 0x1000, Len: MaxRndvLen + 1, Key: 1}},
		{"wraps the address space", RndvMsg{Addr: ^uint64(0) - 10, Len: 100, Key: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [RndvMsgLen]byte
			tc.m.Marshal(b[:])
			_, err := ParseRndvMsg(b[:])
			assert.ErrorIs(t, err, ErrRndvMsg)
			_, in := rndvPair()
			assert.ErrorIs(t, in.TakeRndv(b[:]), ErrRndvMsg)
			assert.False(t, in.Rndv.Pending)
		})
	}
	_, err := ParseRndvMsg(make([]byte, RndvMsgLen-1))
	assert.ErrorIs(t, err, ErrRndvMsg)
}

func TestRndvZeroAllocs(t *testing.T) {
	out, in := rndvPair()
	var box [RndvMsgLen]byte
	RndvMsg{Addr: 0x10000, Len: 4096, Key: 3}.Marshal(box[:])
	allocs := testing.AllocsPerRun(100, func() {
		out.RndvSent()
		out.Credits++
		if _, err := Receive(&in, &out, ImmCtl(CtlRndv), RndvMsgLen); err != nil {
			panic(err)
		}
		if err := in.TakeRndv(box[:]); err != nil {
			panic(err)
		}
		in.RndvRead(4096)
		if _, err := Receive(&in, &out, ImmCtl(CtlRndvDone), 0); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
}

// FuzzRndv feeds a reader's window arbitrary messages with arbitrary
// mailbox contents, and its reader arbitrary piece sizes: nothing panics,
// a rendezvous only ever hands out its own range, never more than its
// length, and while one is pending no data lands.
func FuzzRndv(f *testing.F) {
	f.Add([]byte{0x05, 0, 0, 0x80, 0x10, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 3, 0, 0, 0, 0x40})
	f.Add([]byte{0x0a, 0, 0, 0, 0x0a, 0, 0, 0, 0})
	f.Add([]byte{0x06, 0, 0, 0x80, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, in := rndvPair()
		out.Tail, out.Credits = 3000, 10
		for len(b) >= 9 {
			imm := binary.LittleEndian.Uint32(b)
			byteLen := binary.LittleEndian.Uint32(b[4:])
			take := uint64(b[8]) * 97
			b = b[9:]
			pending := in.Rndv.Pending
			tail := in.Tail
			k, err := Receive(&in, &out, imm, byteLen)
			if err != nil {
				return
			}
			if pending && in.Tail != tail {
				t.Fatalf("data landed while a rendezvous was pending")
			}
			if k == KindRndv {
				if len(b) < RndvMsgLen {
					return
				}
				if in.TakeRndv(b[:RndvMsgLen]) != nil {
					return
				}
				b = b[RndvMsgLen:]
			}
			in.Consume(int(in.Buffered()))
			in.Credited = in.Head
			if addr, _, left := in.RndvNext(); left > 0 {
				m := in.Rndv.Msg
				if addr < m.Addr || addr+left != m.Addr+uint64(m.Len) || left > MaxRndvLen {
					t.Fatalf("rendezvous piece outside its range: %#x+%d of %+v", addr, left, m)
				}
				in.RndvRead(min(take, left))
			}
		}
	})
}
