//go:build cgo && linux && cudagpu

package rdmacore

import (
	"bytes"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// TestGPUDmaBuf registers GPU memory as an MR through its dma-buf and
// moves data between it and host memory with RDMA WRITE and READ over a
// loopback pair of QPs on the first RDMA device. It needs a GPU with CUDA
// 11.7 or later and an RDMA device whose driver registers dma-bufs (mlx5,
// with the kernel's dma-buf peer-to-peer support):
//
//	go test -tags cudagpu -run GPUDmaBuf ./verbs/rdmacore
//
// CUDA_DEVICE picks the GPU (default 0), RDMA_DEVICE the RDMA device and
// RDMA_GID_INDEX the GID (default: the first IPv4 one on RoCE).
func TestGPUDmaBuf(t *testing.T) {
	const size = 2 << 20 // a multiple of the GPU's page size
	ordinal, _ := strconv.Atoi(os.Getenv("CUDA_DEVICE"))
	gpu, err := allocGPU(ordinal, size)
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer gpu.free()
	fd, err := gpu.dmaBuf()
	require.NoError(t, err)
	defer os.NewFile(uintptr(fd), "gpu-dmabuf").Close()

	p, err := verbs.Lookup(ProviderName)
	require.NoError(t, err)
	devs, err := p.Devices()
	require.NoError(t, err)
	if len(devs) == 0 {
		t.Skip("no RDMA device")
	}
	name := devs[0].Name
	if d := os.Getenv("RDMA_DEVICE"); d != "" {
		name = d
	}
	ctx, err := p.Open(name)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Dealloc()
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	// The GPU's virtual address as the iova, as NCCL and perftest do.
	gmr, err := pd.RegDmaBufMR(0, size, gpu.addr(), fd, all)
	require.NoError(t, err, "registering GPU memory on %s", name)
	defer gmr.Dereg()
	mem, err := verbs.AllocMemory(2 * size)
	require.NoError(t, err)
	defer mem.Free()
	host := mem.Bytes()[:2*size]
	hmr, err := pd.RegMR(host, all)
	require.NoError(t, err)
	defer hmr.Dereg()
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	defer cq.Destroy()
	a, b := loopbackPair(t, ctx, pd, cq)
	defer a.Destroy()
	defer b.Destroy()

	src, back := host[:size], host[size:]
	for i := range src {
		src[i] = byte(i*7 + i>>12)
	}
	post := func(wr verbs.SendWR) {
		require.NoError(t, a.PostSend([]verbs.SendWR{wr}))
		wc := make([]verbs.WC, 1)
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := cq.Poll(wc)
			require.NoError(t, err)
			if n == 1 {
				require.Equal(t, verbs.WCSuccess, wc[0].Status, "%v", wc[0].Status)
				return
			}
			require.True(t, time.Now().Before(deadline), "no completion")
		}
	}
	post(verbs.SendWR{WRID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(hmr, src)}, RemoteAddr: gmr.Addr(), RKey: gmr.RKey()})
	check := make([]byte, size)
	require.NoError(t, gpu.toHost(check))
	require.True(t, bytes.Equal(src, check), "the WRITE is not in GPU memory")
	post(verbs.SendWR{WRID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(hmr, back)}, RemoteAddr: gmr.Addr(), RKey: gmr.RKey()})
	require.True(t, bytes.Equal(src, back), "the READ of GPU memory brought back other bytes")
}

// loopbackPair connects two QPs of one device to each other without the
// CM, by LID on InfiniBand and by GID on RoCE.
func loopbackPair(t *testing.T, ctx verbs.Context, pd verbs.PD, cq verbs.CQ) (a, b verbs.QP) {
	port, err := ctx.QueryPort(1)
	require.NoError(t, err)
	var ah verbs.AHAttr
	ah.DLID, ah.PortNum = port.LID, 1
	if port.LinkLayer == verbs.LinkLayerEthernet {
		idx := -1
		if s := os.Getenv("RDMA_GID_INDEX"); s != "" {
			idx, _ = strconv.Atoi(s)
		}
		for i := 0; idx < 0 && i < port.GIDTblLen; i++ {
			if g, err := ctx.QueryGID(1, i); err == nil && netip.AddrFrom16(g).Is4In6() {
				idx = i
			}
		}
		require.GreaterOrEqual(t, idx, 0, "no IPv4 GID on port 1: set RDMA_GID_INDEX")
		gid, err := ctx.QueryGID(1, idx)
		require.NoError(t, err)
		ah.IsGlobal, ah.GRH = true, verbs.GlobalRoute{DGID: gid, SGIDIndex: idx, HopLimit: 1}
	}
	mk := func() verbs.QP {
		q, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, q.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
			AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
		return q
	}
	a, b = mk(), mk()
	for _, pair := range [][2]verbs.QP{{a, b}, {b, a}} {
		require.NoError(t, pair[0].Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: port.ActiveMTU, DestQPNum: pair[1].Num(),
			RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: ah},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
		require.NoError(t, pair[0].Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxRdAtomic))
	}
	return a, b
}
