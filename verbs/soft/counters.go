package soft

import "sync/atomic"

// Counters are the soft engine's own counters over every QP, listener and
// connection of the process since it started: what a NIC's hw_counters
// show for its ports. They count rare events (an RNR NAK, a timeout, a
// connection that had to wait to be admitted), never messages, so the data
// path does not touch them.
type Counters struct {
	// RNR NAKs: a SEND or RDMA WRITE WITH IMMEDIATE that found no receive
	// posted, answered by this process's responders (sent) and met by its
	// requesters (received).
	RNRNaksSent     uint64
	RNRNaksReceived uint64
	// Retransmits counts requests sent again: after an RNR NAK the
	// requester goes back to the NAKed request and sends it and every one
	// after it again (the frames ride on TCP or shared memory, which lose
	// nothing, so nothing else is resent).
	Retransmits uint64
	// AckTimeouts counts transport timer expiries that found sends
	// outstanding and no progress since the last (as a NIC's
	// local_ack_timeout_err); RetryExceeded the QPs whose sends then
	// failed with RETRY_EXC_ERR, RNRRetryExceeded those whose sends failed
	// with RNR_RETRY_EXC_ERR.
	AckTimeouts      uint64
	RetryExceeded    uint64
	RNRRetryExceeded uint64
	// PeerStalls counts transport timer expiries that found sends
	// outstanding and no progress while the transport itself answered: the
	// peer's process was not running (stopped, starved), as a NIC's peer
	// whose NIC goes on acknowledging. They cost no retry. LateTimers
	// counts expiries that came a whole timeout late, this process having
	// not run: they charge nothing to the peer either.
	PeerStalls uint64
	LateTimers uint64

	// A listener's handshake admission (admission.go). AdmissionParked
	// counts connections that found every waiting place taken and were
	// parked; AdmissionSlotWaits connections whose request was there and
	// which had to wait for a handshake slot (once each, however often
	// they were woken); AdmissionEvicted waiting
	// connections closed after silentAfter without their request, for
	// another host's newcomer or parked connection; AdmissionDropped parked
	// connections closed because too many were parked.
	AdmissionParked    uint64
	AdmissionSlotWaits uint64
	AdmissionEvicted   uint64
	AdmissionDropped   uint64

	// Connection requests that offered shared memory, as this process's
	// listeners answered them: on the rings (accepted), or on TCP
	// (refused: the peer is on another host or boot, of another uid, offers
	// a larger ring than this side maps, or its socket did not answer).
	ShmOffersAccepted uint64
	ShmOffersRefused  uint64
	// Connection requests of this process's dials that offered shared
	// memory, as the listener answered them: on the rings or to follow
	// (accepted), or on TCP (refused: the listener's side could not take
	// the offer, or does not map rings).
	ShmDialsAccepted uint64
	ShmDialsRefused  uint64
}

// counters are the process's Counters as they are counted.
var counters struct {
	rnrSent, rnrRecv, retransmits       atomic.Uint64
	ackTimeouts, retryExc, rnrRetryExc  atomic.Uint64
	peerStalls, lateTimers              atomic.Uint64
	parked, slotWaits, evicted, dropped atomic.Uint64
	shmAccepted, shmRefused             atomic.Uint64
	shmDialAccepted, shmDialRefused     atomic.Uint64
}

// ReadCounters returns the soft engine's counters now.
func ReadCounters() Counters {
	c := &counters
	return Counters{
		RNRNaksSent:        c.rnrSent.Load(),
		RNRNaksReceived:    c.rnrRecv.Load(),
		Retransmits:        c.retransmits.Load(),
		AckTimeouts:        c.ackTimeouts.Load(),
		RetryExceeded:      c.retryExc.Load(),
		RNRRetryExceeded:   c.rnrRetryExc.Load(),
		PeerStalls:         c.peerStalls.Load(),
		LateTimers:         c.lateTimers.Load(),
		AdmissionParked:    c.parked.Load(),
		AdmissionSlotWaits: c.slotWaits.Load(),
		AdmissionEvicted:   c.evicted.Load(),
		AdmissionDropped:   c.dropped.Load(),
		ShmOffersAccepted:  c.shmAccepted.Load(),
		ShmOffersRefused:   c.shmRefused.Load(),
		ShmDialsAccepted:   c.shmDialAccepted.Load(),
		ShmDialsRefused:    c.shmDialRefused.Load(),
	}
}
