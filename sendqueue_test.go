package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The send queue's checks: data and control messages need a queue slot
// and two message credits, a credit message one of each, a probe only the
// WR the QP keeps beyond sqDepth; a WR a writer reserved counts as taken.
func TestSendQueueChecks(t *testing.T) {
	c := &Conn{sqDepth: 4}
	c.tx.Credits = 2
	assert.True(t, c.sqIdle())
	assert.True(t, c.canSendData())
	assert.True(t, c.canSendCredit())
	assert.True(t, c.canProbe())

	c.sqPosted, c.sqDone, c.sqReserved = 13, 10, 1 // 3 outstanding, 1 reserved: full
	assert.Equal(t, uint64(4), c.sqUsed())
	assert.False(t, c.sqIdle())
	assert.False(t, c.sqHasRoom())
	assert.False(t, c.canSendData())
	assert.False(t, c.canSendCredit())
	assert.True(t, c.canProbe(), "the probe's own WR")

	c.sqPosted++ // the probe
	assert.False(t, c.canProbe())

	c.sqDone, c.sqReserved = 13, 0 // one outstanding
	assert.True(t, c.canSendData())
	c.tx.Credits = 1
	assert.False(t, c.canSendData(), "the last credit is kept for a credit message")
	assert.True(t, c.canSendCredit())
	c.tx.Credits = 0
	assert.False(t, c.canSendCredit())

	c.sqDone = c.sqPosted
	assert.True(t, c.sqIdle())
}
