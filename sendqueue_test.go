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
	c.c.SQ = sendq.NewQueue(4, 6)
	c.c.TX.Credits = 2
	assert.True(t, c.c.CanSendData())
	assert.True(t, c.c.CanSendCredit())

	c.c.SQ.Posted, c.c.SQ.Done = 4, 0 // full
	assert.False(t, c.c.CanSendData())
	assert.False(t, c.c.CanSendCredit())
	assert.False(t, c.c.CanSendNotify())

	c.c.SQ.Done = 3
	assert.True(t, c.c.CanSendData())
	c.c.TX.Credits = 1
	assert.False(t, c.c.CanSendData(), "the last credit is kept for a credit message")
	assert.True(t, c.c.CanSendCredit())
	c.c.TX.Credits = 0
	assert.False(t, c.c.CanSendCredit())
}
