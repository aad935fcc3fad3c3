package stream

// The credit rule, whole. A writer may write into the peer's ring only
// what the peer has freed (byte credit), and each write consumes one of
// the receive WRs the peer posted (a message credit). Both come back in
// credit messages (ImmCredit), which the receiver sends as its reader
// frees ring bytes and as it reposts receives. This file holds every
// decision of that rule; the connection asks it and does what it says.
//
// Sender's half (Send): a data write, a FIN, a control message (a
// rendezvous's, a ring offer, a heartbeat's ping or pong) takes a message
// credit and leaves at least one, which only a credit message may use: a
// writer that spent its last credit on data could not tell its peer that
// ring space is free, and two writers blocked on each other would wait
// forever. A one-sided notification leaves KeptCredits: its receive stays
// held until the peer's program takes the notification, so without the
// second one kept a peer that takes none for a while could not be pinged
// and would be found unresponsive.
//
// Receiver's half (Recv): a credit message is due when a quarter of the
// ring or of the receive WRs is owed (CreditDue), so credit comes back in
// quarter-window steps, never as slivers that would shred the peer's
// stream into tiny writes; receives are reposted in batches, at once when
// the peer is starved, that is down to the credits it keeps back
// (Starved): then what is due goes back now rather than with the next
// batch, or its pings, and so the connection, would starve.

// KeptCredits is how many message credits a writer keeps back from a
// notification: one for a credit message, one for a heartbeat's ping.
const KeptCredits = 2

// keptForCredit is the message credit every message but a credit message
// leaves.
const keptForCredit = 1

// MayData reports whether a data write or a control message may take a
// message credit now.
func (s *Send) MayData() bool { return s.Credits > keptForCredit }

// MayNotify reports whether a one-sided notification may take a message
// credit now.
func (s *Send) MayNotify() bool { return s.Credits > KeptCredits }

// MayCredit reports whether a credit message may take a message credit
// now: it may take the last.
func (s *Send) MayCredit() bool { return s.Credits > 0 }

// Spend takes the message credit of a message that May... allowed (a data
// write's is taken by Reserve).
func (s *Send) Spend() { s.Credits-- }

// credit takes in a credit message.
func (s *Send) credit(recvs int, units uint64, byteLen uint32) error {
	bytes := units << s.Shift
	if byteLen != 0 || s.Credits+recvs > s.Depth || bytes > s.Tail-s.Acked {
		return ErrCreditTooMuch
	}
	s.Credits += recvs
	s.Acked += bytes
	return nil
}

// CreditDue says what a credit message would return now: ring bytes in
// units, and receive WRs; due when a quarter of either window is owed, or
// when force and anything is.
func (r *Recv) CreditDue(force bool) (recvs int, units uint64, due bool) {
	units = min((r.Head-r.Credited)>>r.Shift, CreditBytesMax)
	recvs = min(r.Owed, CreditRecvMax)
	due = units<<r.Shift >= r.Size/4 || recvs >= r.Depth/4 || (force && (units > 0 || recvs > 0))
	return recvs, units, due
}

// Credit records that a credit message returning recvs and units left.
func (r *Recv) Credit(recvs int, units uint64) {
	r.Credited += units << r.Shift
	r.Owed -= recvs
}

// Starved reports whether the peer is down to the message credits it
// keeps back: of the receives posted, those not yet credited (Owed) and
// those a notification holds until the program takes it (held) are not
// the peer's to use.
func (r *Recv) Starved(posted, held int) bool { return posted-r.Owed-held <= KeptCredits }

// RepostNow reports whether due receives (consumed, not yet reposted)
// should be reposted now: a whole batch of them, or any while the peer is
// starved.
func RepostNow(due, batch int, starved bool) bool { return due > 0 && (due >= batch || starved) }
