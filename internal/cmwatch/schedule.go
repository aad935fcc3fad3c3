package cmwatch

import "time"

// Schedule is when a connection's watch wakes: every Period, the shortest
// of the periods its timers ask for (the keepalive's, the heartbeat's,
// the peer's answer time), and whether a wake-up came a whole period late,
// which says that this process did not run (stopped, starved).
type Schedule struct {
	Period time.Duration // between wake-ups; 0: none
	Next   time.Time     // the next wake-up; zero: none
}

// NewSchedule is the schedule of a watch started at now that serves
// periods (those not above zero ask for nothing).
func NewSchedule(now time.Time, periods ...time.Duration) Schedule {
	var s Schedule
	for _, p := range periods {
		if p > 0 && (s.Period == 0 || p < s.Period) {
			s.Period = p
		}
	}
	if s.Period > 0 {
		s.Next = now.Add(s.Period)
	}
	return s
}

// Late reports whether a wake-up at now comes a whole period after the
// one that was due.
func (s *Schedule) Late(now time.Time) bool {
	return !s.Next.IsZero() && now.Sub(s.Next) > s.Period
}

// Woke moves the schedule on from a wake-up at now, and returns the next.
func (s *Schedule) Woke(now time.Time) time.Time {
	s.Next = now.Add(s.Period)
	return s.Next
}
