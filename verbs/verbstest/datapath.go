package verbstest

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func fill(b []byte, first byte) {
	for i := range b {
		b[i] = first + byte(i*7)
	}
}

func init() {
	register("SendRecv", testSendRecv)
	register("SendWithImm", testSendWithImm)
	register("RDMAWrite", testRDMAWrite)
	register("RDMAWriteWithImm", testRDMAWriteWithImm)
	register("RDMARead", testRDMARead)
	register("Unsignaled", testUnsignaled)
	register("Inline", testInline)
	register("SGEList", testSGEList)
	register("CompletionOrder", testCompletionOrder)
	register("LargeTransfers", testLargeTransfers)
	register("SendFence", testSendFence)
}

func testSendRecv(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	postRecv(t, sv, 11, 0, 4096)
	msg := c.buf[0:100]
	fill(msg, 1)
	postSend(t, c, verbs.SendWR{WRID: 22, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, msg)}})
	wc := s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, uint64(22), wc.WRID)
	require.Equal(t, verbs.WCSend, wc.Opcode)
	require.Equal(t, c.qp.Num(), wc.QPNum)
	wc = s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.Equal(t, uint64(11), wc.WRID)
	require.Equal(t, verbs.WCRecv, wc.Opcode)
	require.Equal(t, uint32(100), wc.ByteLen)
	require.Zero(t, wc.Flags&verbs.WCWithImm)
	require.Equal(t, msg, sv.buf[:100])
}

func testSendWithImm(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	postRecv(t, sv, 1, 0, 64)
	fill(c.buf[:10], 3)
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpSendWithImm, Imm: 0xdeadbeef, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:10])}})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	wc := s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.Equal(t, verbs.WCRecv, wc.Opcode)
	require.NotZero(t, wc.Flags&verbs.WCWithImm)
	require.Equal(t, uint32(0xdeadbeef), wc.Imm)
	require.Equal(t, uint32(10), wc.ByteLen)
	require.Equal(t, c.buf[:10], sv.buf[:10])
}

func testRDMAWrite(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	src := c.buf[4096 : 4096+3000]
	fill(src, 9)
	dst := sv.buf[8192 : 8192+3000]
	postSend(t, c, verbs.SendWR{WRID: 5, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: verbs.AddrOf(dst), RKey: sv.mr.RKey()})
	wc := s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, verbs.WCRDMAWrite, wc.Opcode)
	// A completed RDMA WRITE on RC means the data is in the peer's memory.
	require.Equal(t, src, dst)
	quiet(t, sv.rcq, 20e6)
}

func testRDMAWriteWithImm(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	postRecv(t, sv, 77, 0, 16)
	src := c.buf[:5000]
	fill(src, 4)
	dst := sv.buf[65536 : 65536+5000]
	postSend(t, c, verbs.SendWR{WRID: 6, Opcode: verbs.OpRDMAWriteWithImm, Imm: 42, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: verbs.AddrOf(dst), RKey: sv.mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	wc := s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.Equal(t, uint64(77), wc.WRID)
	require.Equal(t, verbs.WCRecvRDMAWithImm, wc.Opcode)
	require.Equal(t, uint32(42), wc.Imm)
	require.NotZero(t, wc.Flags&verbs.WCWithImm)
	require.Equal(t, uint32(5000), wc.ByteLen, "byte_len is the written length")
	require.Equal(t, src, dst)
	require.Equal(t, make([]byte, 16), sv.buf[:16], "the receive buffer is not written")
}

func testRDMARead(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	src := sv.buf[100000 : 100000+7000]
	fill(src, 8)
	dst := c.buf[:7000]
	postSend(t, c, verbs.SendWR{WRID: 8, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, dst)}, RemoteAddr: verbs.AddrOf(src), RKey: sv.mr.RKey()})
	wc := s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, verbs.WCRDMARead, wc.Opcode)
	require.Equal(t, src, dst)
}

func testUnsignaled(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	for i := 0; i < 3; i++ {
		postRecv(t, sv, uint64(i), i*64, 64)
	}
	sg := []verbs.SGE{verbs.SGEOf(c.mr, c.buf[:8])}
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, SG: sg})
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpSend, SG: sg})
	postSend(t, c, verbs.SendWR{WRID: 3, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: sg})
	wc := s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, uint64(3), wc.WRID, "only the signaled WR completes")
	s.poll(t, sv.rcq, 3)
	quiet(t, c.scq, 20e6)
}

func testInline(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	postRecv(t, sv, 1, 0, 64)
	// Inline data is copied at post time: the source may change right after.
	src := make([]byte, 40) // Go memory: inline ignores lkeys
	fill(src, 5)
	want := bytes.Clone(src)
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SG: []verbs.SGE{{Addr: verbs.AddrOf(src), Length: uint32(len(src))}}})
	clear(src)
	s.pollOne(t, c.scq, verbs.WCSuccess)
	wc := s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.Equal(t, uint32(40), wc.ByteLen)
	require.Equal(t, want, sv.buf[:40])
}

func testSGEList(t *testing.T, s *suite) {
	c, sv := s.pair(t, defaultOpts())
	// Gather three pieces, scatter into two.
	a, b, d := c.buf[0:10], c.buf[1000:1500], c.buf[5000:5090]
	fill(a, 1)
	fill(b, 2)
	fill(d, 3)
	want := append(append(bytes.Clone(a), b...), d...)
	r1, r2 := sv.buf[0:300], sv.buf[4096:4096+1000]
	require.NoError(t, sv.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SG: []verbs.SGE{verbs.SGEOf(sv.mr, r1), verbs.SGEOf(sv.mr, r2)}}}))
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, a), verbs.SGEOf(c.mr, b), verbs.SGEOf(c.mr, d)}})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	wc := s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.Equal(t, uint32(len(want)), wc.ByteLen)
	require.Equal(t, want[:300], r1)
	require.Equal(t, want[300:], r2[:len(want)-300])

	// RDMA WRITE gathers too; RDMA READ scatters.
	dst := sv.buf[200000 : 200000+len(want)]
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, a), verbs.SGEOf(c.mr, b), verbs.SGEOf(c.mr, d)}, RemoteAddr: verbs.AddrOf(dst), RKey: sv.mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, want, dst)
	x, y := c.buf[300000:300100], c.buf[310000:310000+len(want)-100]
	postSend(t, c, verbs.SendWR{WRID: 3, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, x), verbs.SGEOf(c.mr, y)}, RemoteAddr: verbs.AddrOf(dst), RKey: sv.mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.Equal(t, want, append(bytes.Clone(x), y...))
}

func testCompletionOrder(t *testing.T, s *suite) {
	o := defaultOpts()
	o.signalAll = true
	c, sv := s.pair(t, o)
	const n = 48
	for i := 0; i < n; i++ {
		postRecv(t, sv, uint64(1000+i), i*64, 64)
	}
	remote := sv.buf[500000:]
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		src := c.buf[i*64 : i*64+64]
		fill(src, byte(i))
		switch i % 3 {
		case 0:
			wrs[i] = verbs.SendWR{Opcode: verbs.OpSend, SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}}
		case 1:
			wrs[i] = verbs.SendWR{Opcode: verbs.OpRDMAWrite, SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: verbs.AddrOf(remote[i*64:]), RKey: sv.mr.RKey()}
		case 2:
			wrs[i] = verbs.SendWR{Opcode: verbs.OpRDMARead, SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[200000+i*64:200000+i*64+64])}, RemoteAddr: verbs.AddrOf(remote[i*64:]), RKey: sv.mr.RKey()}
		}
		wrs[i].WRID = uint64(i)
	}
	require.NoError(t, c.qp.PostSend(wrs))
	wcs := s.poll(t, c.scq, n)
	for i, wc := range wcs {
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, uint64(i), wc.WRID, "send completions in post order")
	}
	sends := 0
	for i := 0; i < n; i += 3 {
		sends++
	}
	rwcs := s.poll(t, sv.rcq, sends)
	for i, wc := range rwcs {
		require.Equal(t, uint64(1000+i), wc.WRID, "receive completions in post order")
		require.Equal(t, c.buf[i*3*64:i*3*64+64], sv.buf[i*64:i*64+64])
	}
}

// largePair is a connected pair with 8 MiB of registered memory each.
func (s *suite) largePair(t *testing.T) (client, server *endpoint) {
	o := defaultOpts()
	o.memSize = 8 << 20
	return s.pair(t, o)
}

func testLargeTransfers(t *testing.T, s *suite) {
	c, sv := s.largePair(t)
	const size = 1 << 20
	src := c.buf[:size]
	fill(src, 77)
	for i := 0; i < 4; i++ {
		postRecv(t, sv, uint64(i), i*size, size)
	}
	for i := 0; i < 4; i++ {
		postSend(t, c, verbs.SendWR{WRID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}})
	}
	s.poll(t, c.scq, 4)
	for i, wc := range s.poll(t, sv.rcq, 4) {
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, uint32(size), wc.ByteLen)
		require.True(t, bytes.Equal(src, sv.buf[i*size:(i+1)*size]))
	}
	dst := sv.buf[4*size : 5*size]
	postSend(t, c, verbs.SendWR{WRID: 9, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: verbs.AddrOf(dst), RKey: sv.mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.True(t, bytes.Equal(src, dst))
	back := c.buf[2*size : 3*size]
	postSend(t, c, verbs.SendWR{WRID: 10, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled, SG: []verbs.SGE{verbs.SGEOf(c.mr, back)}, RemoteAddr: verbs.AddrOf(dst), RKey: sv.mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.True(t, bytes.Equal(src, back))
}

// testSendFence: a WR flagged SendFence starts only once the READs posted
// before it have completed, so its arrival tells the responder that the
// READ has taken its bytes and the memory may change (a rendezvous's done
// message relies on it). The responder rewrites the READ's source as soon
// as the fenced WRITE arrives; the READ must still carry the old bytes.
func testSendFence(t *testing.T, s *suite) {
	c, sv := s.largePair(t)
	const size = 4 << 20
	src := sv.buf[:size]
	fill(src, 21)
	want := bytes.Clone(src)
	dst := c.buf[:size]
	for round := 0; round < 4; round++ {
		clear(dst)
		postRecv(t, sv, uint64(round), size, 16)
		require.NoError(t, c.qp.PostSend([]verbs.SendWR{
			{WRID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(c.mr, dst)}, RemoteAddr: verbs.AddrOf(src), RKey: sv.mr.RKey()},
			{WRID: 2, Opcode: verbs.OpRDMAWriteWithImm, Imm: 9, Flags: verbs.SendSignaled | verbs.SendFence,
				RemoteAddr: verbs.AddrOf(sv.buf[size:]), RKey: sv.mr.RKey()},
		}))
		wc := s.pollOne(t, sv.rcq, verbs.WCSuccess)
		require.Equal(t, uint32(9), wc.Imm)
		fill(src, byte(100+round)) // what a writer does once told the READ is done
		wcs := s.poll(t, c.scq, 2)
		require.Equal(t, verbs.WCSuccess, wcs[0].Status)
		require.Equal(t, uint64(1), wcs[0].WRID)
		require.True(t, bytes.Equal(want, dst), "round %d: the READ carried bytes written after the fenced WR arrived", round)
		copy(src, want)
	}
}
