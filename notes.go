package rdma

// notification is one notification from the peer (WriteRemoteNotify),
// not yet taken.
type notification struct {
	value uint32
	n     uint32
}

// noteQueue holds the peer's notifications until the program takes them
// (WaitNotify), in arrival order: a ring made on the first, doubling from
// notesStartSlots up to a limit, the receive depth, as each holds back the
// credit of its receive WR. The connection's mu guards it.
type noteQueue struct {
	ring    []notification
	head, n int
}

// len is how many notifications are held.
func (q *noteQueue) len() int { return q.n }

// push appends nt, growing the ring up to limit; false (nothing held)
// when limit are held: the peer sent beyond its credit.
func (q *noteQueue) push(nt notification, limit int) bool {
	if q.n == len(q.ring) {
		if len(q.ring) >= limit {
			return false
		}
		ring := make([]notification, min(max(notesStartSlots, 2*len(q.ring)), limit))
		for i := range q.n {
			ring[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.n)%len(q.ring)] = nt
	q.n++
	return true
}

// pop takes the oldest notification; false when none is held.
func (q *noteQueue) pop() (notification, bool) {
	if q.n == 0 {
		return notification{}, false
	}
	nt := q.ring[q.head]
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return nt, true
}

// idle reports whether the ring holds memory but no notification.
func (q *noteQueue) idle() bool { return len(q.ring) > 0 && q.n == 0 }

// trim drops the ring unless it holds notifications: an idle connection
// gives the memory back.
func (q *noteQueue) trim() {
	if q.n == 0 {
		*q = noteQueue{}
	}
}
