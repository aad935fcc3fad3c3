package connface

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/verbs/soft"
)

// newFace is a face of a connection on provider with no verbs objects:
// what the face itself keeps is all that is tested here.
func newFace(t *testing.T, provider string) *Face {
	t.Helper()
	f := new(Face)
	f.Init(provider, core.Poller{F: &f.Core})
	t.Cleanup(func() {
		f.Core.ReadDL.Stop()
		f.Core.WriteDL.Stop()
	})
	return f
}

// Snapshot reports what both wires count, each counter in its own field,
// the addresses, the fallback, the wire's failure and what the wire adds;
// a soft connection whose queue pair is gone has no path.
func TestSnapshot(t *testing.T) {
	f := newFace(t, soft.Name)
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 2}
	f.Established(local, remote)
	f.SetFallback(errors.New("no answer over the CM"))
	st := f.Core.Counters
	st.BytesSent, st.BytesRecv, st.Writes = 10, 20, 3
	st.MsgsSent, st.MsgsRecv = 4, 5
	st.CreditWaits, st.WriteWait = 6, 7*time.Millisecond
	st.Reads[connstats.WaitNone], st.Reads[connstats.WaitHanded] = 1, 2
	st.Reads[connstats.WaitSpun], st.Reads[connstats.WaitSlept] = 3, 4
	st.RemoteWrites.Store(8)
	st.RemoteReads.Store(9)
	st.Exposures.Store(11)
	failed := errors.New("it broke")

	s := f.Snapshot("stream", &core.Endpoint{}, func(s *connstats.Snapshot, got *connstats.Counters) error {
		assert.Same(t, st, got, "the wire is handed the counters")
		s.RingSize = 4096
		return failed
	})

	assert.Equal(t, soft.Name, s.Provider)
	assert.Equal(t, "stream", s.Wire)
	assert.Equal(t, local.String(), s.LocalAddr)
	assert.Equal(t, remote.String(), s.RemoteAddr)
	assert.Equal(t, "no answer over the CM", s.Fallback)
	assert.Equal(t, "it broke", s.Err)
	assert.Equal(t, 4096, s.RingSize, "what the wire adds")
	assert.Equal(t, [3]uint64{10, 20, 3}, [3]uint64{s.BytesSent, s.BytesReceived, s.Writes})
	assert.Equal(t, [2]uint64{4, 5}, [2]uint64{s.MessagesSent, s.MessagesReceived})
	assert.Equal(t, uint64(6), s.CreditWaits)
	assert.Equal(t, 7*time.Millisecond, s.WriteWaitTime)
	assert.Equal(t, [5]uint64{1, 2, 3, 4, 10}, [5]uint64{s.ReadsAtOnce, s.ReadsHanded, s.ReadsSpun, s.ReadsSlept, s.Reads})
	assert.Equal(t, [3]uint64{8, 9, 11}, [3]uint64{s.RemoteWrites, s.RemoteReads, s.Exposures})
	assert.False(t, s.Opened.IsZero(), "opened when established")
	assert.False(t, s.Closed)
	assert.Equal(t, "", s.Path, "a soft connection without a queue pair has no path")
	assert.Zero(t, s.RTT)
}

// A connection not established yet reports no addresses, and its face
// gives them as nil; the provider and a nil fallback read back as set.
func TestFaceBeforeEstablished(t *testing.T) {
	f := newFace(t, "rdmacore")
	assert.Nil(t, f.LocalAddr())
	assert.Nil(t, f.RemoteAddr())
	assert.Equal(t, "rdmacore", f.Provider())
	assert.NoError(t, f.Fallback())
	s := f.Snapshot("rsocket", &core.Endpoint{}, func(*connstats.Snapshot, *connstats.Counters) error { return nil })
	assert.Empty(t, s.LocalAddr)
	assert.Empty(t, s.Err)
	assert.Equal(t, "rdmacore", s.Path, "another provider is its own path")
	require.Equal(t, "rsocket", s.Wire)
}

// PathOf names soft's path by its carrier and any other provider by its
// name.
func TestPathOf(t *testing.T) {
	assert.Equal(t, "rdmacore", PathOf("rdmacore", nil))
	assert.Equal(t, "", PathOf(soft.Name, nil))
}
