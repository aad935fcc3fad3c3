package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmanet/rdma/internal/sendq"
)

// The connection's checks weigh the peer's message credits with the
// queue's room: a data write keeps the last credit for a credit message.
func TestSendQueueCreditChecks(t *testing.T) {
	c := new(Conn)
	c.sq = sendq.NewQueue(4, 6)
	c.tx.Credits = 2
	assert.True(t, c.canSendData())
	assert.True(t, c.canSendCredit())

	c.sq.Posted, c.sq.Done = 4, 0 // full
	assert.False(t, c.canSendData())
	assert.False(t, c.canSendCredit())
	assert.False(t, c.canSendNotify())

	c.sq.Done = 3
	assert.True(t, c.canSendData())
	c.tx.Credits = 1
	assert.False(t, c.canSendData(), "the last credit is kept for a credit message")
	assert.True(t, c.canSendCredit())
	c.tx.Credits = 0
	assert.False(t, c.canSendCredit())
}
