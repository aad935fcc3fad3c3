package streamconn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/sendq"
	"github.com/rdmanet/rdma/verbs"
)

// postRecorder is a QP that records the send WRs posted to it and what it
// saw of the connection's lock and submit role while they were posted.
type postRecorder struct {
	verbs.QP
	c        *Conn
	batches  []int
	lockFree []bool // mu could be taken during the post
	role     []bool // the submit role was held during the post
}

func (r *postRecorder) PostSend(wrs []verbs.SendWR) error {
	r.batches = append(r.batches, len(wrs))
	free := r.c.Core.Mu.TryLock()
	if free {
		r.role = append(r.role, r.c.SQ.Submitting)
		r.c.Core.Mu.Unlock()
	}
	r.lockFree = append(r.lockFree, free)
	return nil
}

// unlockSubmit posts what was queued under mu, with mu released while the
// QP takes it and the submit role held, and returns with mu released and
// the role free; while another goroutine holds the role, it leaves the
// posting to it.
func TestUnlockSubmitPostsWhatWasQueued(t *testing.T) {
	c := &Conn{}
	rec := &postRecorder{c: c}
	c.EP.QP = rec
	c.SQ = sendq.NewQueue(16, 32)
	queue := func(n int) {
		for range n {
			c.SQ.Push(verbs.SendWR{Opcode: verbs.OpRDMAWriteWithImm}, nil, 0, 1<<20, false)
		}
	}

	c.Core.Mu.Lock()
	queue(3)
	c.send().unlockSubmit()
	require.True(t, c.Core.Mu.TryLock(), "mu still held after unlockSubmit")
	assert.Equal(t, []int{3}, rec.batches, "the three WRs in one post")
	assert.Equal(t, []bool{true}, rec.lockFree, "mu held during the post")
	assert.Equal(t, []bool{true}, rec.role, "the submit role not held during the post")
	assert.Equal(t, c.SQ.Posted, c.SQ.Submitted)
	assert.False(t, c.SQ.Submitting, "the submit role kept")

	// Another goroutine holds the role: it posts what is queued.
	c.SQ.Submitting = true
	queue(2)
	c.send().unlockSubmit()
	require.True(t, c.Core.Mu.TryLock(), "mu still held after unlockSubmit")
	assert.Len(t, rec.batches, 1, "posted beside the role's holder")
	c.SQ.Submitting = false

	// Nothing queued: nothing posted.
	require.NoError(t, c.send().submitLocked())
	assert.Equal(t, []int{3, 2}, rec.batches, "the holder's post of the two")
	c.send().unlockSubmit()
	require.True(t, c.Core.Mu.TryLock(), "mu still held after unlockSubmit")
	c.send().unlockSubmit()
	assert.Len(t, rec.batches, 2, "a post with nothing queued")
	assert.True(t, c.Core.Mu.TryLock(), "mu still held after unlockSubmit")
}
