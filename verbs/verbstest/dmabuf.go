package verbstest

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("DmaBufMR", testDmaBufMR)
}

// A dma-buf registered as an MR (PD.RegDmaBufMR) is memory like any other
// to the peer and to local WRs, named from its iova. The dma-buf is host
// memory from /dev/udmabuf, whose CPU view lets the test see what the
// device did. A provider that cannot register dma-bufs
// (Config.DmaBufUnsupported) must say so with EOPNOTSUPP and the device's
// name.
func testDmaBufMR(t *testing.T, s *suite) {
	const size = 1 << 16
	const iova = 0x7f0000100000 // any address: the MR names its bytes from here
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	u, uerr := verbs.AllocUdmabuf(size)
	if uerr == nil {
		t.Cleanup(func() { require.NoError(t, u.Close()) })
	}
	if why := s.cfg.DmaBufUnsupported; why != "" {
		fd := -1 // the provider refuses before it looks at the descriptor
		if uerr == nil {
			fd = u.Fd()
		}
		ctx := s.device(t)
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		defer func() { require.NoError(t, pd.Dealloc()) }()
		mr, err := pd.RegDmaBufMR(0, size, iova, fd, access)
		if err == nil {
			require.NoError(t, mr.Dereg())
		}
		require.ErrorIs(t, err, syscall.EOPNOTSUPP, "%s cannot register dma-bufs (%s)", ctx.Name(), why)
		require.ErrorContains(t, err, ctx.Name(), "the error names the device")
		t.Logf("as expected (%s): %v", why, err)
		return
	}
	if uerr != nil {
		if errors.Is(uerr, verbs.ErrNoUdmabuf) {
			t.Skipf("no dma-buf to register: %v", uerr)
		}
		require.NoError(t, uerr)
	}
	c, sv := s.pair(t, defaultOpts())
	mr, err := sv.pd.RegDmaBufMR(0, size, iova, u.Fd(), access)
	require.NoError(t, err)
	released := false
	defer func() {
		if !released {
			require.NoError(t, mr.Dereg())
		}
	}()
	require.Equal(t, uint64(iova), mr.Addr())
	require.Equal(t, size, mr.Len())
	mem := u.Bytes()

	// The peer WRITEs into it and READs it back.
	src := c.buf[:5000]
	fill(src, 41)
	postSend(t, c, verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, src)}, RemoteAddr: iova + 100, RKey: mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.True(t, bytes.Equal(src, mem[100:5100]), "the WRITE is not in the dma-buf's memory")
	fill(mem[8192:8192+3000], 99)
	back := c.buf[16384 : 16384+3000]
	postSend(t, c, verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, back)}, RemoteAddr: iova + 8192, RKey: mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	require.True(t, bytes.Equal(mem[8192:8192+3000], back), "the READ brought back other bytes")

	// Local WRs name it by iova and lkey: a SEND from it, a receive into it.
	postRecv(t, c, 3, 32768, 64)
	fill(mem[20000:20064], 7)
	postSend(t, sv, verbs.SendWR{WRID: 4, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{{Addr: iova + 20000, Length: 64, LKey: mr.LKey()}}})
	s.pollOne(t, sv.scq, verbs.WCSuccess)
	s.pollOne(t, c.rcq, verbs.WCSuccess)
	require.Equal(t, mem[20000:20064], c.buf[32768:32768+64])
	require.NoError(t, sv.qp.PostRecv([]verbs.RecvWR{{WRID: 5, SG: []verbs.SGE{{Addr: iova + 30000, Length: 64, LKey: mr.LKey()}}}}))
	fill(c.buf[40000:40064], 13)
	postSend(t, c, verbs.SendWR{WRID: 6, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, c.buf[40000:40064])}})
	s.pollOne(t, c.scq, verbs.WCSuccess)
	s.pollOne(t, sv.rcq, verbs.WCSuccess)
	require.Equal(t, c.buf[40000:40064], mem[30000:30064])

	// Outside its bounds, or after Dereg, the peer reaches nothing.
	require.NoError(t, mr.Dereg())
	released = true
	postSend(t, c, verbs.SendWR{WRID: 7, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(c.mr, src[:8])}, RemoteAddr: iova, RKey: mr.RKey()})
	s.pollOne(t, c.scq, verbs.WCRemAccessErr)
}
