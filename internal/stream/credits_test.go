package stream

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSenderKeepsItsLastCreditsBack(t *testing.T) {
	for credits, want := range []struct{ data, notify, credit bool }{
		0: {false, false, false},
		1: {false, false, true}, // the last is a credit message's only
		2: {true, false, true},  // a notification leaves one more, for a ping
		3: {true, true, true},
	} {
		s := Send{Credits: credits}
		assert.Equal(t, want.data, s.MayData(), "data with %d credits", credits)
		assert.Equal(t, want.notify, s.MayNotify(), "notification with %d credits", credits)
		assert.Equal(t, want.credit, s.MayCredit(), "credit message with %d credits", credits)
	}
	s := Send{Credits: 3}
	s.Spend()
	assert.Equal(t, 2, s.Credits)
}

func TestReceiverRepostsInBatchesUnlessThePeerStarves(t *testing.T) {
	r := NewRecv(16, 16, 64)
	// 64 posted, 10 of them not yet credited, 50 held by notifications
	// the program has not taken: the peer may use 4.
	r.Owed = 10
	assert.False(t, r.Starved(64, 50))
	assert.True(t, r.Starved(64, 52), "down to the credits it keeps back")
	assert.True(t, r.Starved(64, 54))

	assert.False(t, RepostNow(0, 16, true), "nothing to repost")
	assert.False(t, RepostNow(15, 16, false), "less than a batch")
	assert.True(t, RepostNow(16, 16, false), "a whole batch")
	assert.True(t, RepostNow(1, 16, true), "any while the peer starves")
}

func TestCreditIsDueInQuarterWindowSteps(t *testing.T) {
	r := NewRecv(12, 12, 64) // 4 KiB ring
	unit := uint64(1) << r.Shift
	r.Head = r.Size/4 - unit
	r.Owed = 15
	_, _, due := r.CreditDue(false)
	assert.False(t, due, "less than a quarter of either window")
	recvs, units, due := r.CreditDue(true)
	assert.True(t, due, "forced, and something is owed")
	assert.Equal(t, 15, recvs)
	assert.Equal(t, (r.Size/4-unit)>>r.Shift, units)

	r.Owed = 16
	_, _, due = r.CreditDue(false)
	assert.True(t, due, "a quarter of the receive WRs")
	r.Owed, r.Head = 0, r.Size/4
	recvs, units, due = r.CreditDue(false)
	assert.True(t, due, "a quarter of the ring")
	r.Credit(recvs, units)
	assert.Equal(t, r.Head, r.Credited)
	_, _, due = r.CreditDue(true)
	assert.False(t, due, "nothing owed after the credit went")
}
