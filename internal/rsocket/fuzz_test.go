package rsocket

import (
	"bytes"
	"testing"
)

// FuzzParseConnData: whatever a peer puts in its private data, parsing
// returns an error or values within the bounds this side relies on, and a
// parsed value marshals back to the same 40 bytes.
func FuzzParseConnData(f *testing.F) {
	f.Add(connDataGolden)
	f.Add(make([]byte, 56))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConnData(b)
		if err != nil {
			return
		}
		if c.Version != Version || c.Credits == 0 || c.TargetSGL.Length == 0 || c.TargetSGL.Length > maxPeerSGLSlots ||
			c.DataBuf.Length == 0 || c.DataBuf.Length > MaxBuf {
			t.Fatalf("accepted out-of-bounds connection data %+v", c)
		}
		out := make([]byte, ConnDataLen)
		c.Marshal(out)
		want := bytes.Clone(b[:ConnDataLen])
		want[4], want[5], want[6] = 0, 0, 0 // reserved: not kept
		if !bytes.Equal(out, want) {
			t.Fatalf("round trip: %x != %x", out, want)
		}
	})
}

// FuzzPeerMessages drives both sides with what a peer controls: the
// immediates of messages it writes (data lengths, credits, grants with
// arbitrary SGEs) and its connection data. Nothing panics, and the local
// invariants hold whatever the peer sends.
func FuzzPeerMessages(f *testing.F) {
	f.Add(connDataGolden, []byte{0, 0, 0, 64, 1, 0x80, 0, 1, 0x80})
	f.Add(connDataGolden, []byte{2, 0, 0, 16, 3, 0x80, 0, 0, 0x10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, cd []byte, ops []byte) {
		peer, err := ParseConnData(cd)
		if err != nil {
			return
		}
		var tx Tx
		var rx Rx
		const rbuf = 16 << 10
		tx.Init(peer, 32, 8<<10)
		rx.Init(rbuf, 0x1000, 7, 32, peer)
		sge := make([]byte, SGELen)
		for len(ops) >= 5 {
			op, imm := ops[0], uint32(ops[1])<<24|uint32(ops[2])<<16|uint32(ops[3])<<8|uint32(ops[4])
			ops = ops[5:]
			switch op % 6 {
			case 0: // a data message lands
				_ = rx.OnData(MsgData(imm))
			case 1: // the application reads
				_, n := rx.Buffered()
				rx.Consume(min(n, uint64(imm)))
			case 2: // a credit without a grant
				_ = tx.OnCredit(MsgData(imm), nil)
			case 3: // a credit with a grant: the SGE comes from the peer too
				if len(ops) < SGELen {
					return
				}
				e := ParseSGE(ops, peer.BigEndianSGL())
				ops = ops[SGELen:]
				_ = tx.OnCredit(MsgData(imm), &e)
			case 4: // this side sends
				if d, ok := tx.NextData(int(imm & 0xffff)); ok {
					if d.N == 0 || d.N > MaxTransfer || d.Off >= 8<<10 {
						t.Fatalf("bad data message %+v", d)
					}
				}
			case 5: // a completion, real or not
				_ = tx.Completed(uint64(imm))
				if rx.CreditDue() && tx.CtrlAvail() {
					tx.TakeCtrl()
					rx.TakeCredit(sge)
				}
			}
			if rx.tail-rx.head > rbuf || rx.granted-rx.head > rbuf || rx.tail > rx.granted {
				t.Fatalf("receive window broken: tail %d head %d granted %d", rx.tail, rx.head, rx.granted)
			}
			if tx.Buffered() > 8<<10 || tx.sqeAvail < 0 || tx.sqeAvail > tx.sqeMax || tx.ctrlMax-tx.ctrlSeq > CtrlSlots {
				t.Fatalf("send accounting broken: %+v", tx)
			}
			if uint16(tx.limit-tx.seq) > tx.credits {
				t.Fatalf("credit %d beyond %d", uint16(tx.limit-tx.seq), tx.credits)
			}
		}
	})
}
