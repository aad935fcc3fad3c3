package stream

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestImm(t *testing.T) {
	assert.Equal(t, uint32(ImmKindData), ImmData(65536)>>ImmKindShift)
	c := ImmCredit(1023, CreditBytesMax)
	assert.Equal(t, uint32(ImmKindCredit), c>>ImmKindShift)
	assert.Equal(t, uint32(1023), c>>CreditRecvShift&CreditRecvMax)
	assert.Equal(t, uint32(CreditBytesMax), c&CreditBytesMax)
	assert.Equal(t, uint32(ImmKindCtl), ImmCtl(CtlFin)>>ImmKindShift)
	assert.Equal(t, uint32(0x80000001), ImmCtl(CtlFin), "wire value")
	assert.Equal(t, uint32(0x40500010), ImmCredit(5, 16), "wire value")
	// A whole ring's credit fits the field for every ring size, and a
	// quarter ring is many units.
	for log := uint8(MinRingLog); log <= MaxRingLog; log++ {
		assert.LessOrEqual(t, uint64(1)<<log>>CreditShift(log), uint64(CreditBytesMax), "ring 2^%d", log)
		assert.GreaterOrEqual(t, uint64(1)<<log>>CreditShift(log)/4, uint64(1024), "ring 2^%d", log)
	}
	assert.LessOrEqual(t, MaxRecvDepth, CreditRecvMax)
}

// pair is both directions of one connection: a's Send window is b's Recv
// window seen from the other side.
func pair(ringLog uint8, depth int) (aOut Send, bIn Recv) {
	bIn = NewRecv(ringLog, ringLog, depth)
	bIn.Agree(Version)
	aOut = NewSend(Hello{Version: Version, RecvDepth: uint16(depth), RingAddr: 1 << 20, RingKey: 7, RingLog: ringLog, GrowLog: ringLog}, Version)
	return aOut, bIn
}

func TestDataAndCreditFlow(t *testing.T) {
	out, in := pair(12, 8) // 4 KiB ring
	var back Send          // b's window toward a, unused here
	free, toEnd := out.Room()
	assert.Equal(t, uint64(4096), free)
	assert.Equal(t, uint64(4096), toEnd)

	at, _ := out.Reserve(1000)
	assert.Equal(t, uint64(1<<20), at)
	assert.Equal(t, 7, out.Credits)
	k, err := Receive(&in, &back, ImmData(1000), 1000)
	require.NoError(t, err)
	assert.Equal(t, KindData, k)
	assert.Equal(t, uint64(1000), in.Buffered())

	// Nothing owed yet; reading a quarter ring makes credit due.
	_, _, due := in.CreditDue(false)
	assert.False(t, due)
	in.Consume(1000)
	_, _, due = in.CreditDue(false)
	assert.False(t, due, "1000 bytes < a quarter of 4096")
	recvs, units, due := in.CreditDue(true)
	require.True(t, due)
	assert.Equal(t, 0, recvs)
	assert.Equal(t, uint64(1000), units)
	in.Owed = 1 // the receive the data consumed, reposted
	recvs, units, due = in.CreditDue(true)
	require.True(t, due)
	in.Credit(recvs, units)
	assert.Equal(t, uint64(1000), in.Credited)
	assert.Zero(t, in.Owed)

	// The credit message comes back to the sender.
	var other Recv
	k, err = Receive(&other, &out, ImmCredit(recvs, units), 0)
	require.NoError(t, err)
	assert.Equal(t, KindCredit, k)
	assert.Equal(t, 8, out.Credits, "the reposted receive is credited back")
	assert.Equal(t, uint64(1000), out.Acked)

	// Writes never wrap: at the ring's end, toEnd limits the next one.
	out.Reserve(3000)
	_, toEnd = out.Room()
	assert.Equal(t, uint64(96), toEnd)
}

func TestReceiveRejects(t *testing.T) {
	cases := []struct {
		name    string
		imm     uint32
		byteLen uint32
		setup   func(in *Recv, out *Send)
		want    error
	}{
		{"reserved kind", 3 << ImmKindShift, 0, nil, ErrReservedKind},
		{"zero-length data", ImmData(0), 0, nil, ErrDataLength},
		{"length mismatch", ImmData(20), 10, nil, ErrDataLength},
		{"beyond window", ImmData(4097), 4097, nil, ErrBeyondWindow},
		{"across the ring's end", ImmData(200), 200, func(in *Recv, _ *Send) { in.Tail, in.Head, in.Credited = 4000, 4000, 4000 }, ErrBeyondWindow},
		{"beyond credit", ImmData(100), 100, func(in *Recv, _ *Send) { in.Tail, in.Head = 4096, 4096 }, ErrBeyondWindow},
		{"data after FIN", ImmData(10), 10, func(in *Recv, _ *Send) { in.FinRcvd = true }, ErrDataAfterFin},
		{"credit for unsent bytes", ImmCredit(0, 1000), 0, nil, ErrCreditTooMuch},
		{"credit for unposted receives", ImmCredit(1000, 0), 0, nil, ErrCreditTooMuch},
		{"credit with bytes", ImmCredit(0, 0), 8, nil, ErrCreditTooMuch},
		{"unknown control", ImmCtl(77), 0, nil, ErrControl},
		{"repeated FIN", ImmCtl(CtlFin), 0, func(in *Recv, _ *Send) { in.FinRcvd = true }, ErrControl},
		{"FIN with bytes", ImmCtl(CtlFin), 4, nil, ErrControl},
		{"notify after FIN", ImmNotify(5), 8, func(in *Recv, _ *Send) { in.FinRcvd = true }, ErrDataAfterFin},
		{"ping on version 1", ImmCtl(CtlPing), 0, nil, ErrPingVersion},
		{"pong on version 1", ImmCtl(CtlPong), 0, nil, ErrPingVersion},
		{"ping with bytes", ImmCtl(CtlPing), 4, func(in *Recv, _ *Send) { in.Pings = true }, ErrControl},
		{"pong with bytes", ImmCtl(CtlPong), 1, func(in *Recv, _ *Send) { in.Pings = true }, ErrControl},
		{"control code 7", ImmCtl(7), 0, func(in *Recv, _ *Send) { in.Pings = true }, ErrControl},
		{"ring offer on version 2", ImmCtl(CtlRing), RingMsgLen, func(_ *Recv, out *Send) { out.Grows = false }, ErrRingVersion},
		{"ring offer without its message", ImmCtl(CtlRing), 0, nil, ErrRingMsg},
		{"ring offer twice", ImmCtl(CtlRing), RingMsgLen, func(_ *Recv, out *Send) { out.Next = RingMsg{Addr: 1, Log: 14} }, ErrRingOffer},
		{"data into a ring not offered", ImmData(10) | ImmDataGen, 10, nil, ErrRingNotOffer},
		{"data beyond the offered ring", ImmData(5000) | ImmDataGen, 5000, func(in *Recv, _ *Send) {
			in.Next, in.Tail, in.Head, in.Credited = 4096, 4000, 4000, 0
		}, ErrBeyondWindow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, in := pair(12, 8)
			if tc.setup != nil {
				tc.setup(&in, &out)
			}
			in0, out0 := in, out
			_, err := Receive(&in, &out, tc.imm, tc.byteLen)
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, in0, in, "receive window changed by a rejected message")
			assert.Equal(t, out0, out, "send window changed by a rejected message")
		})
	}
}

func TestFin(t *testing.T) {
	out, in := pair(12, 8)
	k, err := Receive(&in, &out, ImmCtl(CtlFin), 0)
	require.NoError(t, err)
	assert.Equal(t, KindFin, k)
	assert.True(t, in.FinRcvd)
}

func TestNotify(t *testing.T) {
	out, in := pair(12, 8)
	in0, out0 := in, out
	imm := ImmNotify(NotifyValueMax)
	k, err := Receive(&in, &out, imm, 4096)
	require.NoError(t, err)
	assert.Equal(t, KindNotify, k)
	assert.Equal(t, uint32(NotifyValueMax), NotifyValue(imm))
	assert.Equal(t, uint32(7), NotifyValue(ImmNotify(7)))
	assert.Equal(t, in0, in, "a notification leaves the receive window as it was")
	assert.Equal(t, out0, out, "and the send window")
	assert.Equal(t, uint32(ImmKindCtl), imm>>ImmKindShift)
}

// Pings and pongs, on a connection whose handshake agreed on them, change
// nothing in the windows, come any number of times, and still come after
// the peer's FIN (a half-closed peer's connection is alive).
func TestPingPong(t *testing.T) {
	out, in := pair(12, 8)
	in.Pings = true
	in0, out0 := in, out
	for i := 0; i < 3; i++ {
		k, err := Receive(&in, &out, ImmCtl(CtlPing), 0)
		require.NoError(t, err)
		assert.Equal(t, KindPing, k)
		k, err = Receive(&in, &out, ImmCtl(CtlPong), 0)
		require.NoError(t, err)
		assert.Equal(t, KindPong, k)
	}
	assert.Equal(t, in0, in)
	assert.Equal(t, out0, out)
	_, err := Receive(&in, &out, ImmCtl(CtlFin), 0)
	require.NoError(t, err)
	k, err := Receive(&in, &out, ImmCtl(CtlPing), 0)
	require.NoError(t, err)
	assert.Equal(t, KindPing, k)
	assert.Equal(t, uint32(0x80000002), ImmCtl(CtlPing), "wire value")
	assert.Equal(t, uint32(0x80000003), ImmCtl(CtlPong), "wire value")
}

func TestZeroAllocs(t *testing.T) {
	out, in := pair(20, 128)
	var back Send
	back.Depth = 1 << 20
	allocs := testing.AllocsPerRun(1000, func() {
		free, toEnd := out.Room()
		n := min(free, toEnd, 4096)
		if n == 0 {
			return
		}
		out.Reserve(n)
		if _, err := Receive(&in, &back, ImmData(int(n)), uint32(n)); err != nil {
			panic(err)
		}
		in.Consume(int(in.Buffered()))
		in.Owed++
		if recvs, units, due := in.CreditDue(false); due {
			in.Credit(recvs, units)
			if _, err := Receive(&Recv{}, &out, ImmCredit(recvs, units), 0); err != nil {
				panic(err)
			}
		}
	})
	assert.Zero(t, allocs)
	in.Pings = true
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if _, err := Receive(&in, &out, ImmCtl(CtlPing), 0); err != nil {
			panic(err)
		}
	}), "pings allocate nothing")
	_, err := Receive(&in, &out, 3<<ImmKindShift, 0)
	assert.Error(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = Receive(&in, &out, 3<<ImmKindShift, 0) }), "errors allocate nothing")
}

// FuzzReceive feeds arbitrary messages (as a peer could send them) to the
// windows: nothing panics, whatever is accepted keeps the windows within
// what was granted, and heartbeats pass only where the handshake agreed
// on them (the first byte's low bit says whether it did).
func FuzzReceive(f *testing.F) {
	f.Add([]byte{1, 2, 0, 0, 0x80, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 3, 0, 0, 0x80, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0x40})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x81})
	f.Add([]byte{0, 0x10, 0, 0x50, 0x40, 0, 0, 0, 0, 0x10})
	f.Add([]byte{0, 0x07, 0, 0, 0xa0, 0, 0x10, 0, 0, 0x01})                      // a notification
	f.Add([]byte{0x12, 0x10, 0, 0, 0x20, 0x10, 0, 0, 0, 0x10})                   // data into the offered ring
	f.Add([]byte{0x02, 0x04, 0, 0, 0x80, 0x10, 0, 0, 0, 0x10, 0x10, 0, 0, 0x20}) // an offer
	f.Fuzz(func(t *testing.T, b []byte) {
		out, in := pair(MinRingLog, 16)
		if len(b) > 0 {
			in.Pings = b[0]&1 == 1
			if b[0]&2 != 0 { // a ring is offered, and one may be offered to us
				in.GrowLog, out.GrowLog = 16, 16
				in.Offer(MinRingLog + 1 + b[0]>>4%4)
			}
			out.Grows, in.Grows = in.Next != 0, in.Next != 0
			b = b[1:]
		}
		out.Tail = 3000 // pretend we sent this much, so credits have something to cover
		out.Credits = 10
		for len(b) >= 9 {
			imm := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
			byteLen := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24
			consume := b[8]
			b = b[9:]
			in0, out0 := in, out
			k, err := Receive(&in, &out, imm, byteLen)
			if err == nil && (k == KindPing || k == KindPong) && !in.Pings {
				t.Fatalf("heartbeat accepted on a connection without them")
			}
			if err != nil {
				if in != in0 || out != out0 {
					t.Fatalf("rejected message changed the windows")
				}
				return // a failed conn takes no more
			}
			if k == KindRing {
				if err := out.Offer(RingMsg{Addr: 1 << 30, Log: MinRingLog + 1}); err != nil {
					t.Fatalf("offer accepted by Receive refused by Offer: %v", err)
				}
			}
			if in.Tail-max(in.Credited, in.Base) > in.Size || in.Prev.End > in.Base || in.Tail < in.Base ||
				out.Credits > out.Depth || out.Acked > out.Tail {
				t.Fatalf("window broken: %+v %+v", in, out)
			}
			// The reader consumes some, and credit is returned.
			in.Consume(int(min(uint64(consume)*16, in.Buffered())))
			in.Credited = in.Head
		}
	})
}
