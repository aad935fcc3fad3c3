package rsocket

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// A one-way link in memory, as rsocket.c runs it: the sender's Tx writes
// data into the receiver's rbuf at the addresses its target SGL names; the
// receiver's Rx grants regions by writing SGEs into that target SGL and
// returns message credit. Writes complete when delivered.
const (
	rbufBase = 0x10000000
	sglBase  = 0x20000000
	rbufKey  = 0x77
	sglKey   = 0x88
)

type wireMsg struct {
	addr uint64
	key  uint32
	imm  uint32
	data []byte
}

type link struct {
	t        *testing.T
	tx       Tx
	rx       Rx
	sbuf     []byte
	rbuf     []byte
	sgl      []byte // the sender's target SGL memory
	senderBE bool   // the sender announced FlagNet
	toRx     []wireMsg
	toTx     []wireMsg
	ctrlOut  int // credit messages in flight (bounded by CtrlSlots at the receiver)
	sent     []byte
	got      []byte
	msgs     int
}

func newLink(t *testing.T, rbufSize, sbufSize int, rq, sq int, senderBE bool) *link {
	l := &link{t: t, rbuf: make([]byte, rbufSize), sbuf: make([]byte, sbufSize), sgl: make([]byte, SGLSize*SGELen), senderBE: senderBE}
	rcv := ConnData{Version: Version, Credits: uint16(rq), TargetSGL: SGE{Addr: 0xdead, Key: 1, Length: SGLSize},
		DataBuf: FirstRegion(rbufSize, rbufBase, rbufKey)}
	snd := ConnData{Version: Version, Credits: uint16(rq), TargetSGL: SGE{Addr: sglBase, Key: sglKey, Length: SGLSize}}
	if senderBE {
		snd.Flags |= FlagNet
	}
	// Through the wire format, as the peers would see each other.
	b := make([]byte, ConnDataLen)
	rcv.Marshal(b)
	rcv.DataBuf.Length = max(rcv.DataBuf.Length, 1)
	pr, err := ParseConnData(b)
	require.NoError(t, err)
	snd.DataBuf = SGE{Addr: 0xbeef, Key: 2, Length: 1}
	snd.Marshal(b)
	ps, err := ParseConnData(b)
	require.NoError(t, err)
	l.tx.Init(pr, sq, sbufSize)
	l.rx.Init(rbufSize, rbufBase, rbufKey, uint16(rq), ps)
	return l
}

// write stages and "posts" up to len(p) bytes, as the conn does.
func (l *link) write(p []byte) int {
	d, ok := l.tx.NextData(len(p))
	if !ok {
		return 0
	}
	require.LessOrEqual(l.t, int(d.N), len(p))
	// stage into the send buffer, wrapping
	first := copy(l.sbuf[d.Off:], p[:d.N])
	copy(l.sbuf, p[first:d.N])
	data := make([]byte, d.N)
	first = copy(data, l.sbuf[d.Off:min(uint64(len(l.sbuf)), d.Off+uint64(d.N))])
	copy(data[first:], l.sbuf)
	l.toRx = append(l.toRx, wireMsg{addr: d.Addr, key: d.Key, imm: d.Imm, data: data})
	l.sent = append(l.sent, p[:d.N]...)
	l.msgs++
	return int(d.N)
}

// deliver lands the oldest message toward the receiver and completes it.
func (l *link) deliver() {
	m := l.toRx[0]
	l.toRx = l.toRx[1:]
	require.Equal(l.t, uint32(rbufKey), m.key)
	off := m.addr - rbufBase
	require.LessOrEqual(l.t, off+uint64(len(m.data)), uint64(len(l.rbuf)), "write beyond the rbuf")
	copy(l.rbuf[off:], m.data)
	require.NoError(l.t, l.rx.OnData(MsgData(m.imm)))
	require.NoError(l.t, l.tx.Completed(uint64(m.imm)))
}

// read consumes up to n bytes and sends credit when due.
func (l *link) read(n int) {
	off, avail := l.rx.Buffered()
	k := min(uint64(n), avail)
	first := min(k, uint64(len(l.rbuf))-off)
	l.got = append(l.got, l.rbuf[off:off+first]...)
	l.got = append(l.got, l.rbuf[:k-first]...)
	l.rx.Consume(k)
	l.credit()
}

func (l *link) credit() {
	for l.ctrlOut < CtrlSlots && l.rx.CreditDue() {
		sge := make([]byte, SGELen)
		c := l.rx.TakeCredit(sge)
		m := wireMsg{imm: c.Imm}
		if c.WithSGE {
			m.addr, m.key, m.data = c.Addr, c.Key, sge
		}
		l.toTx = append(l.toTx, m)
		l.ctrlOut++
	}
}

// deliverCredit lands the oldest credit message at the sender.
func (l *link) deliverCredit() {
	m := l.toTx[0]
	l.toTx = l.toTx[1:]
	l.ctrlOut--
	require.Equal(l.t, uint32(OpSGL), MsgOp(m.imm))
	var e *SGE
	if m.data != nil {
		require.Equal(l.t, uint32(sglKey), m.key)
		slot := int(m.addr-sglBase) / SGELen
		require.Equal(l.t, l.tx.NextSlot(), slot, "grant into an unexpected entry")
		copy(l.sgl[slot*SGELen:], m.data)
		s := ParseSGE(l.sgl[slot*SGELen:], l.senderBE)
		e = &s
	}
	require.NoError(l.t, l.tx.OnCredit(MsgData(m.imm), e))
}

func TestLinkStream(t *testing.T) {
	for _, tc := range []struct {
		name            string
		rbuf, sbuf      int
		rq, sq          int
		senderBE        bool
		maxWrite, maxRd int
		total           int
	}{
		{"defaults", DefaultRecvBuf, DefaultSendBuf, DefaultQueue, DefaultQueue, false, 200 << 10, 300 << 10, 1 << 20},
		{"small messages wrap the sequence", 8 << 10, 8 << 10, MinQueue, MinQueue, false, 8, 100, 400 << 10},
		{"big-endian sender", 64 << 10, 32 << 10, 32, 32, true, 10 << 10, 7 << 10, 1 << 20},
		{"odd sizes", 6 << 10, 5 << 10, 17, 19, false, 3000, 1, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			l := newLink(t, tc.rbuf, tc.sbuf, tc.rq, tc.sq, tc.senderBE)
			l.credit() // the receiver grants its second half at once, as rsocket.c does
			src := make([]byte, tc.total)
			for i := range src {
				src[i] = byte(rnd.Uint32())
			}
			pos := 0
			for len(l.got) < tc.total {
				progress := false
				switch rnd.IntN(4) {
				case 0:
					if pos < tc.total {
						n := l.write(src[pos:min(tc.total, pos+1+rnd.IntN(tc.maxWrite))])
						pos += n
						progress = n > 0
					}
				case 1:
					if len(l.toRx) > 0 {
						l.deliver()
						progress = true
					}
				case 2:
					before := len(l.got)
					l.read(1 + rnd.IntN(tc.maxRd))
					progress = len(l.got) > before
				case 3:
					if len(l.toTx) > 0 {
						l.deliverCredit()
						progress = true
					}
				}
				_ = progress
			}
			require.True(t, bytes.Equal(src, l.got), "stream corrupted")
			require.Equal(t, src[:pos], l.sent)
			if tc.name == "small messages wrap the sequence" {
				require.Greater(t, l.msgs, 1<<16, "the 16-bit message sequence wrapped")
			}
			for len(l.toTx) > 0 {
				l.deliverCredit()
			}
			require.True(t, l.tx.AllDone())
		})
	}
}

// The link never deadlocks: whatever the sender waits for, delivering and
// reading brings it.
func TestLinkSenderAlwaysResumes(t *testing.T) {
	l := newLink(t, 8<<10, 4<<10, MinQueue, MinQueue, false)
	l.credit()
	p := make([]byte, 1<<20)
	for sent := 0; sent < len(p); {
		n := l.write(p[sent:])
		if n > 0 {
			sent += n
			continue
		}
		stuck := true
		for len(l.toRx) > 0 || len(l.toTx) > 0 || l.rx.tail > l.rx.head {
			stuck = false
			for len(l.toRx) > 0 {
				l.deliver()
			}
			l.read(1 << 30)
			for len(l.toTx) > 0 {
				l.deliverCredit()
			}
			if l.tx.CanSend(len(p) - sent) {
				break
			}
		}
		require.False(t, stuck, "sender blocked with nothing in flight")
		require.True(t, l.tx.CanSend(len(p)-sent), "sender still blocked after the link drained")
	}
}

func TestRxRejects(t *testing.T) {
	l := newLink(t, 8<<10, 8<<10, MinQueue, MinQueue, false)
	require.Error(t, l.rx.OnData(0), "empty message")
	require.Error(t, l.rx.OnData(4<<10+1), "beyond the first region")
	require.NoError(t, l.rx.OnData(4<<10))
	require.Error(t, l.rx.OnData(1), "nothing more granted")

	l = newLink(t, 1<<20, 8<<10, MinQueue, MinQueue, false)
	for i := 0; i < MinQueue; i++ {
		require.NoError(t, l.rx.OnData(1))
	}
	require.Error(t, l.rx.OnData(1), "more messages than the receive depth")
	l.rx.Consume(1)
	require.NoError(t, l.rx.OnData(1), "one consumed, one more may land")
}

func TestTxRejects(t *testing.T) {
	l := newLink(t, 8<<10, 8<<10, 32, 32, false)
	require.Error(t, l.tx.OnCredit(33, nil), "credit beyond the peer's receive depth")
	require.NoError(t, l.tx.OnCredit(32, nil))
	require.Error(t, l.tx.OnCredit(31, nil), "credit going back")
	e := SGE{Addr: 1, Key: 2, Length: 100}
	require.NoError(t, l.tx.OnCredit(32, &e))
	require.Error(t, l.tx.OnCredit(32, &e), "entry 0 still holds the first region")
	require.Error(t, l.tx.Completed(uint64(Msg(OpData, 10))), "nothing sent")
	require.Error(t, l.tx.Completed(uint64(Msg(OpCtrl, CtrlShutdown))), "no control message sent")
	require.Error(t, l.tx.Completed(1<<40), "not a message id")
	require.Error(t, l.tx.Completed(uint64(Msg(OpWrite, 0))))
	bad := SGE{Addr: 1, Key: 2, Length: 0}
	l = newLink(t, 8<<10, 8<<10, 32, 32, false)
	require.Error(t, l.tx.OnCredit(32, &bad), "empty region")
}

func TestCreditSchedule(t *testing.T) {
	// rsocket.c: credit is due at once (half the rbuf is ungranted), then
	// after half the receive depth is consumed; each message carries
	// rseq+rqSize.
	l := newLink(t, 8<<10, 8<<10, 16, 16, false)
	require.True(t, l.rx.CreditDue())
	c := l.rx.TakeCredit(make([]byte, SGELen))
	require.True(t, c.WithSGE)
	require.Equal(t, Msg(OpSGL, 16), c.Imm)
	require.Equal(t, uint64(sglBase+SGELen), c.Addr, "the first grant goes to entry 1")
	require.False(t, l.rx.CreditDue())
	for i := 0; i < 7; i++ {
		require.NoError(t, l.rx.OnData(1))
		l.rx.Consume(1)
		require.False(t, l.rx.CreditDue(), "after %d", i+1)
	}
	require.NoError(t, l.rx.OnData(1))
	l.rx.Consume(1)
	require.True(t, l.rx.CreditDue())
	c = l.rx.TakeCredit(make([]byte, SGELen))
	require.False(t, c.WithSGE)
	require.Equal(t, Msg(OpSGL, 8+16), c.Imm)
}

func TestZeroAllocs(t *testing.T) {
	l := newLink(t, 1<<20, 1<<20, DefaultQueue, DefaultQueue, false)
	sge := make([]byte, SGELen)
	raw := bytes.Clone(connDataGolden)
	e := SGE{Addr: 1, Key: 1, Length: 1 << 19}
	allocs := testing.AllocsPerRun(100, func() {
		d, ok := l.tx.NextData(64)
		if !ok {
			t.Fatal("cannot send")
		}
		if err := l.rx.OnData(d.N); err != nil {
			t.Fatal(err)
		}
		if err := l.tx.Completed(uint64(d.Imm)); err != nil {
			t.Fatal(err)
		}
		_, n := l.rx.Buffered()
		l.rx.Consume(n)
		if l.rx.CreditDue() {
			c := l.rx.TakeCredit(sge)
			l.tx.TakeCtrl()
			var ep *SGE
			if c.WithSGE {
				e = ParseSGE(sge, false)
				ep = &e
			}
			if err := l.tx.OnCredit(MsgData(c.Imm), ep); err != nil {
				t.Fatal(err)
			}
			if err := l.tx.Completed(uint64(c.Imm)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ParseConnData(raw); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}
