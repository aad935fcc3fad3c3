package cmwatch

import (
	"testing"
	"time"
)

// The watch wakes every shortest period asked for, and a wake-up a whole
// period past the one due is late.
func TestSchedule(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewSchedule(now, 0, 3*time.Second, time.Second, -time.Second)
	if s.Period != time.Second || !s.Next.Equal(now.Add(time.Second)) {
		t.Fatalf("schedule %+v: want a period of 1s from now", s)
	}
	if s.Late(now.Add(2 * time.Second)) {
		t.Error("a wake-up one period after the one due is not late")
	}
	if !s.Late(now.Add(2*time.Second + time.Millisecond)) {
		t.Error("a wake-up more than a period after the one due is late")
	}
	if next := s.Woke(now.Add(5 * time.Second)); !next.Equal(now.Add(6 * time.Second)) {
		t.Errorf("next wake-up %v, want a period after the last", next)
	}
	if none := NewSchedule(now, 0, 0); none.Period != 0 || !none.Next.IsZero() || none.Late(now.Add(time.Hour)) {
		t.Errorf("no periods: %+v, want no wake-ups and nothing late", none)
	}
}
