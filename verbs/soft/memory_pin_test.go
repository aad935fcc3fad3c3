package soft

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// verbs.Memory.Free refuses (EBUSY) while an MR of any PD covers any of
// the block, and frees it once the last is deregistered.
func TestMemoryFreeWhileRegistered(t *testing.T) {
	p1, p2 := &pd{}, &pd{}
	mem, err := verbs.AllocMemory(8192)
	require.NoError(t, err)
	a, err := p1.RegMR(mem.Bytes()[:4096], verbs.AccessLocalWrite)
	require.NoError(t, err)
	b, err := p2.RegMR(mem.Bytes()[4096:4100], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	require.Equal(t, 2, mem.Registered())
	require.ErrorIs(t, mem.Free(), syscall.EBUSY)
	require.NoError(t, a.Dereg())
	require.ErrorIs(t, mem.Free(), syscall.EBUSY, "another PD's MR still covers it")
	mem.Bytes()[4096] = 1 // still mapped
	require.NoError(t, b.Dereg())
	require.ErrorIs(t, b.Dereg(), verbs.ErrClosed)
	require.Equal(t, 0, mem.Registered(), "a second Dereg unpins nothing")
	require.NoError(t, mem.Free())
	require.NoError(t, mem.Free(), "twice is a no-op")
	_, err = p1.RegMR(mem.Bytes(), verbs.AccessLocalWrite)
	require.Error(t, err, "freed memory is not registrable")
}
