package verbs_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func TestErrorIsErrno(t *testing.T) {
	err := verbs.Errorf("ibv_post_send", syscall.EINVAL, "too many SGEs (%d)", 40)
	require.True(t, errors.Is(err, syscall.EINVAL))
	require.False(t, errors.Is(err, syscall.ENOMEM))
	require.Equal(t, "ibv_post_send: too many SGEs (40): invalid argument", err.Error())
	require.Equal(t, "rdma_connect: connection refused", (&verbs.Error{Op: "rdma_connect", Errno: syscall.ECONNREFUSED}).Error())
	require.Equal(t, "x: why", (&verbs.Error{Op: "x", Detail: "why"}).Error())
	require.Nil(t, (&verbs.Error{Op: "x"}).Unwrap())
	pe := &verbs.PostError{Index: 3, Err: err}
	require.True(t, errors.Is(pe, syscall.EINVAL))
	require.Equal(t, err.Error(), pe.Error())
}

func TestAllocMemory(t *testing.T) {
	_, err := verbs.AllocMemory(0)
	require.True(t, errors.Is(err, syscall.EINVAL))
	m, err := verbs.AllocMemory(100)
	require.NoError(t, err)
	require.GreaterOrEqual(t, m.Len(), 100)
	require.Zero(t, m.Len()%4096, "whole pages")
	require.Zero(t, m.Addr()%4096, "page aligned")
	b := m.Bytes()
	require.Equal(t, make([]byte, m.Len()), b, "zeroed")
	b[0], b[len(b)-1] = 1, 2

	got, off := verbs.MemoryOf(b[10:20])
	require.Same(t, m, got)
	require.Equal(t, 10, off)
	require.Equal(t, uint64(m.Addr())+10, verbs.AddrOf(b[10:]))
	got, _ = verbs.MemoryOf(make([]byte, 10))
	require.Nil(t, got, "Go heap memory is not registrable")
	got, _ = verbs.MemoryOf(nil)
	require.Nil(t, got)

	m2, err := verbs.AllocMemory(1)
	require.NoError(t, err)
	got, _ = verbs.MemoryOf(m2.Bytes())
	require.Same(t, m2, got)
	require.NoError(t, m2.Free())
	require.NoError(t, m2.Free(), "Free twice is a no-op")

	require.NoError(t, m.Free())
	got, _ = verbs.MemoryOf(b[:1])
	require.Nil(t, got, "freed memory is forgotten")
}

type fakeProvider struct{ name string }

func (p fakeProvider) Name() string                                    { return p.name }
func (p fakeProvider) Devices() ([]verbs.DeviceInfo, error)            { return nil, nil }
func (p fakeProvider) Open(string) (verbs.Context, error)              { return nil, verbs.ErrNoDevice }
func (p fakeProvider) CreateEventChannel() (verbs.EventChannel, error) { return nil, verbs.ErrNoDevice }

// registryRun numbers TestRegistry's runs: the registry is the process's,
// so each run (go test -count) registers names of its own.
var registryRun atomic.Int32

func TestRegistry(t *testing.T) {
	run := registryRun.Add(1)
	a, b := fmt.Sprintf("zz-test-%d-a", run), fmt.Sprintf("zz-test-%d-b", run)
	verbs.Register(fakeProvider{b})
	verbs.Register(fakeProvider{a})
	require.Panics(t, func() { verbs.Register(fakeProvider{a}) })
	p, err := verbs.Lookup(a)
	require.NoError(t, err)
	require.Equal(t, a, p.Name())
	_, err = verbs.Lookup("no-such-provider")
	require.ErrorContains(t, err, "no-such-provider")
	names := verbs.Providers()
	ia, ib := -1, -1
	for i, n := range names {
		switch n {
		case a:
			ia = i
		case b:
			ib = i
		}
	}
	require.True(t, ia >= 0 && ib == ia+1, "sorted: %v", names)
}

func TestNames(t *testing.T) {
	require.Equal(t, "RDMA_CM_EVENT_ESTABLISHED", verbs.EventEstablished.String())
	require.Equal(t, "RDMA_CM_EVENT_TIMEWAIT_EXIT", verbs.EventTimewaitExit.String())
	require.Equal(t, "UNKNOWN EVENT", verbs.CMEventType(99).String())
	require.Equal(t, "remote access error", verbs.WCRemAccessErr.String())
	require.Equal(t, "WR flushed", verbs.WCWRFlushErr.String())
	require.Equal(t, "unknown", verbs.WCStatus(-1).String())
	require.Equal(t, "RECV_RDMA_WITH_IMM", verbs.WCRecvRDMAWithImm.String())
	require.Equal(t, "RDMA_READ", verbs.OpRDMARead.String())
	require.Equal(t, "ERR", verbs.QPSErr.String())
	require.Equal(t, "ACTIVE", verbs.PortActive.String())
	require.Equal(t, 4096, verbs.MTU4096.Bytes())
	require.Equal(t, 256, verbs.MTU256.Bytes())
	require.Zero(t, verbs.MTU(9).Bytes())
}
