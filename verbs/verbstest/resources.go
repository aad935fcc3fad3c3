package verbstest

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func init() {
	register("DeviceQuery", testDeviceQuery)
	register("MRRegistration", testMRRegistration)
	register("CQCreate", testCQCreate)
	register("QPCreateLimits", testQPCreateLimits)
	register("DestroyOrder", testDestroyOrder)
}

func isErrno(err error, errno syscall.Errno) bool { return errors.Is(err, errno) }

func testDeviceQuery(t *testing.T, s *suite) {
	devs, err := s.p.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs)
	for _, d := range devs {
		require.NotEmpty(t, d.Name)
		require.NotEmpty(t, d.Transport)
	}
	_, err = s.p.Open("no-such-device-0")
	require.Error(t, err)
	ctx := s.device(t)
	require.Equal(t, devs[0].Name, ctx.Name())
	require.Equal(t, s.cfg.Provider, ctx.Provider())
	a, err := ctx.Query()
	require.NoError(t, err)
	require.GreaterOrEqual(t, a.MaxSGE, 2)
	require.GreaterOrEqual(t, a.MaxQPWR, 64)
	require.GreaterOrEqual(t, a.MaxCQE, 256)
	require.Greater(t, a.MaxMRSize, uint64(1<<20))
	require.GreaterOrEqual(t, a.PhysPortCnt, 1)
	require.Greater(t, a.MaxQP, 0)
	pa, err := ctx.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, verbs.PortActive, pa.State)
	require.Greater(t, pa.ActiveMTU.Bytes(), 0)
	require.LessOrEqual(t, pa.ActiveMTU, pa.MaxMTU)
	require.Greater(t, pa.GIDTblLen, 0)
	require.Greater(t, pa.MaxMsgSize, uint32(1<<20))
	_, err = ctx.QueryPort(a.PhysPortCnt + 1)
	require.Error(t, err)
	g, err := ctx.QueryGID(1, 0)
	require.NoError(t, err)
	require.NotEqual(t, verbs.GID{}, g)
	_, err = ctx.QueryGID(1, pa.GIDTblLen+1000)
	require.Error(t, err)
}

func testMRRegistration(t *testing.T, s *suite) {
	ctx := s.device(t)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer func() { require.NoError(t, pd.Dealloc()) }()

	// Go heap memory is refused: the GC may move or free it under a device.
	_, err = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	require.True(t, isErrno(err, syscall.EINVAL), "Go heap memory: %v", err)
	_, err = pd.RegMR(nil, verbs.AccessLocalWrite)
	require.Error(t, err)

	m := memory(t, 1<<16)
	// REMOTE_WRITE without LOCAL_WRITE is invalid, as in ibv_reg_mr.
	_, err = pd.RegMR(m.Bytes(), verbs.AccessRemoteWrite)
	require.True(t, isErrno(err, syscall.EINVAL), "REMOTE_WRITE alone: %v", err)

	acc := verbs.AccessLocalWrite | verbs.AccessRemoteRead
	mr, err := pd.RegMR(m.Bytes()[4096:8192], acc)
	require.NoError(t, err)
	require.Equal(t, 4096, mr.Len())
	require.Equal(t, verbs.AddrOf(m.Bytes()[4096:]), mr.Addr())
	require.Equal(t, acc, mr.Access())
	require.Equal(t, m.Bytes()[4096:8192], mr.Bytes())
	mr2, err := pd.RegMR(m.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.NotEqual(t, mr.LKey(), mr2.LKey(), "each MR has its own key")

	err = pd.Dealloc()
	require.True(t, isErrno(err, syscall.EBUSY), "dealloc with MRs: %v", err)
	require.NoError(t, mr.Dereg())
	require.NoError(t, mr2.Dereg())
}

func testCQCreate(t *testing.T, s *suite) {
	ctx := s.device(t)
	a, err := ctx.Query()
	require.NoError(t, err)
	_, err = ctx.CreateCQ(0, nil)
	require.Error(t, err)
	_, err = ctx.CreateCQ(a.MaxCQE+1, nil)
	require.Error(t, err)
	cq, err := ctx.CreateCQ(10, nil)
	require.NoError(t, err)
	require.GreaterOrEqual(t, cq.Cap(), 10)
	require.Nil(t, cq.Channel())
	wc := make([]verbs.WC, 4)
	n, err := cq.Poll(wc)
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, cq.Destroy())
}

func testQPCreateLimits(t *testing.T, s *suite) {
	ch := s.channel(t)
	id, err := ch.CreateID()
	require.NoError(t, err)
	defer func() { require.NoError(t, id.Destroy()) }()
	require.NoError(t, id.BindAddr(s.addr(0)))
	ctx := id.Context()
	require.NotNil(t, ctx)
	a, err := ctx.Query()
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer func() { require.NoError(t, pd.Dealloc()) }()
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, cq.Destroy()) }()
	good := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	for name, c := range map[string]verbs.QPCap{
		"send SGE":  {MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: a.MaxSGE + 1, MaxRecvSGE: 1},
		"recv SGE":  {MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: a.MaxSGE + 1},
		"send WR":   {MaxSendWR: a.MaxQPWR + 1, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1},
		"recv WR":   {MaxSendWR: 8, MaxRecvWR: a.MaxQPWR + 1, MaxSendSGE: 1, MaxRecvSGE: 1},
		"inline":    {MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 1 << 20},
		"nil attrs": {},
	} {
		attr := &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: c}
		if name == "nil attrs" {
			attr = nil
		}
		_, err := id.CreateQP(pd, attr)
		require.Error(t, err, name)
	}
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: good})
	require.NoError(t, err)
	qa, err := qp.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.QPSInit, qa.State, "rdma_create_qp leaves the QP in INIT")
	require.GreaterOrEqual(t, qa.Cap.MaxSendWR, 8)
	require.GreaterOrEqual(t, qa.Cap.MaxRecvSGE, 1)
	require.Equal(t, qp.Num(), qa.QPNum)
	err = cq.Destroy()
	require.True(t, isErrno(err, syscall.EBUSY), "destroying a CQ in use: %v", err)
	require.NoError(t, qp.Destroy())
}

func testDestroyOrder(t *testing.T, s *suite) {
	ctx := s.device(t)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	m := memory(t, 4096)
	mr, err := pd.RegMR(m.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	require.Error(t, pd.Dealloc())
	require.NoError(t, mr.Dereg())
	require.Error(t, mr.Dereg(), "double dereg")
	require.NoError(t, pd.Dealloc())
}
