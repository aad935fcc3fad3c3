// Package connstats holds a connection's counters (Counters), counted by
// the parts that do the work where they already run, and read by the root
// package's Stats into the public ConnStats. It takes no lock of its own:
// the connection's mu guards all but the atomics.
package connstats

import (
	"sync/atomic"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// Counters is the counting a connection does on its data path. Read
// counts as it consumes what it returns and Write as it queues each chunk,
// both under the connection's mu, which they hold there anyway; the rest is
// counted under mu too, where the code that moves it already runs, and
// Stats reads it all under mu. The one-sided counters are atomics: those
// operations take mu only where the operation itself does. Nothing here
// allocates or takes a lock of its own on the paths of Read and Write, and
// no clock is read per message: the time of the last message is when the
// watch or Stats first saw its counter move (LastSeenStep).
type Counters struct {
	ReadWait WaitKind // the current Read's wait so far (the reader's, under rmu)
	// One-sided operations: atomics, as they run beside Read and Write
	// and take mu only where the operation itself does.
	RemoteWrites, RemoteReads atomic.Uint64
	RemoteWritten, RemoteRead atomic.Uint64
	NotesSent, NotesRecv      atomic.Uint64
	Exposures                 atomic.Uint64

	// Under mu: Read and Write count where they take it anyway, so the
	// data path pays plain increments (atomics here cost a 64 B round
	// trip on shared memory 4-5%).
	BytesSent, BytesRecv                 uint64
	Writes                               uint64
	Reads                                [4]uint64 // Reads by how they waited (WaitKind)
	MsgsSent, MsgsRecv                   uint64
	CreditWaits, RingWaits, SendBufWaits uint64
	WriteWait                            time.Duration
	ReadWaits                            uint64
	Spins, Caught, Refused, Sleeps       uint64 // the poll role's, copied when it is let go
	RingGrowths, SendGrowths, Trims      uint64
	Keepalives, PingsSent, PongsRecv     uint64
	PingsRecv, PongsSent                 uint64
	RndvSent, RndvWindowed, RndvRecv     uint64
	SeenSent, SeenRecv                   uint64
	SeenSentAt, SeenRecvAt               time.Time
	Opened                               time.Time
}

// RemoteDone counts a one-sided operation of opcode on n bytes, if *err
// says it succeeded (deferred by oneSided).
func (s *Counters) RemoteDone(opcode verbs.Opcode, n int, err *error) {
	if *err != nil {
		return
	}
	switch opcode {
	case verbs.OpRDMARead:
		s.RemoteReads.Add(1)
		s.RemoteRead.Add(uint64(n))
	case verbs.OpRDMAWriteWithImm:
		s.NotesSent.Add(1)
		fallthrough
	default:
		s.RemoteWrites.Add(1)
		s.RemoteWritten.Add(uint64(n))
	}
}

// WaitKind is how a Read's data came, from the least to the most costly.
type WaitKind uint8

const (
	WaitNone   WaitKind = iota // there at once
	WaitHanded                 // another caller applied it
	WaitSpun                   // the reader's own spin caught it
	WaitSlept                  // the reader slept on the completion channel
)

// WroteLocked counts n bytes a Write queued, first saying they are the
// Write's first (Write calls it as it queues each chunk: the sum is what
// Write returns). Called with mu held.
func (s *Counters) WroteLocked(n int, first bool) {
	s.BytesSent += uint64(n)
	if first {
		s.Writes++
	}
}

// ReadLocked counts a Read that returns n bytes (n > 0), by how it waited.
// Called with mu held, by the reader (rmu).
func (s *Counters) ReadLocked(n int) {
	s.BytesRecv += uint64(n)
	s.Reads[s.ReadWait&3]++ // one per Read: Reads is their sum
	s.ReadWait = WaitNone
}

// SeeLocked notes, at now, whether messages moved since last seen: the
// times of the last message each way are when they were first seen moved.
func (s *Counters) SeeLocked(now time.Time) {
	if s.MsgsSent != s.SeenSent {
		s.SeenSent, s.SeenSentAt = s.MsgsSent, now
	}
	if s.MsgsRecv != s.SeenRecv {
		s.SeenRecv, s.SeenRecvAt = s.MsgsRecv, now
	}
}
