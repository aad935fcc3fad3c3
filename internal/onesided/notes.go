package onesided

// Note is one notification from the peer (WriteRemoteNotify),
// not yet taken.
type Note struct {
	Value uint32
	N     uint32
}

// notesStartSlots is the ring's first size: most connections that take
// notifications hold few at a time.
const notesStartSlots = 4

// NoteQueue holds the peer's notifications until the program takes them
// (the root package's WaitNotify), in arrival order: a ring made on the first, doubling from
// notesStartSlots up to a limit, the receive depth, as each holds back the
// credit of its receive WR. The connection's mu guards it.
type NoteQueue struct {
	ring    []Note
	head, n int
}

// Len is how many notifications are held.
func (q *NoteQueue) Len() int { return q.n }

// Push appends nt, growing the ring up to limit; false (nothing held)
// when limit are held: the peer sent beyond its credit.
func (q *NoteQueue) Push(nt Note, limit int) bool {
	if q.n == len(q.ring) {
		if len(q.ring) >= limit {
			return false
		}
		ring := make([]Note, min(max(notesStartSlots, 2*len(q.ring)), limit))
		for i := range q.n {
			ring[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.n)%len(q.ring)] = nt
	q.n++
	return true
}

// Pop takes the oldest notification; false when none is held.
func (q *NoteQueue) Pop() (Note, bool) {
	if q.n == 0 {
		return Note{}, false
	}
	nt := q.ring[q.head]
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return nt, true
}

// Slots is the ring's size: 0 before the first notification and after
// Trim.
func (q *NoteQueue) Slots() int { return len(q.ring) }

// Idle reports whether the ring holds memory but no notification.
func (q *NoteQueue) Idle() bool { return len(q.ring) > 0 && q.n == 0 }

// Trim drops the ring unless it holds notifications: an idle connection
// gives the memory back.
func (q *NoteQueue) Trim() {
	if q.n == 0 {
		*q = NoteQueue{}
	}
}
