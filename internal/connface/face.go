// Package connface is what a connection of either wire (rdma.Conn,
// rdma.RsocketConn) shows as a net.Conn over the state both wires share
// (internal/core's Conn): its provider and fallback, its addresses, its
// deadlines, its traffic class and its statistics' common part. A wire's
// engine embeds a Face; the public type's methods are one line each over
// it. It imports nothing of the root package: the addresses are the
// net.Addrs the root made.
package connface

import (
	"net"
	"time"

	"github.com/rdmanet/rdma/internal/connstats"
	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/soft"
)

// Face is a connection's net.Conn face over the state both wires share.
// Core.Mu is the connection's lock: each wire's own state is guarded by it
// too.
type Face struct {
	Prov     string // the verbs provider that carries the connection
	FellBack error  // why an auto dial fell back to soft, or nil

	// The state the wires share (internal/core): locks, Close, the
	// failure, deadlines, wake-ups, the poll role and the counters.
	Core core.Conn
}

// Init readies the face of a connection carried by provider and polled by
// r.
func (f *Face) Init(provider string, r core.Poller) {
	f.Prov = provider
	f.Core.Init(r)
}

// Established takes in the connection's addresses (as the public package
// shows them), once it is established.
func (f *Face) Established(laddr, raddr net.Addr) {
	f.Core.Local, f.Core.Remote = laddr, raddr
	f.Core.Counters.Opened = time.Now()
}

// LocalAddr is the local address: nil until the connection is established.
func (f *Face) LocalAddr() net.Addr { return f.Core.Local }

// RemoteAddr is the peer's address: nil until the connection is
// established.
func (f *Face) RemoteAddr() net.Addr { return f.Core.Remote }

// Provider names the verbs provider that carries the connection.
func (f *Face) Provider() string { return f.Prov }

// Fallback is why an auto dial fell back to soft, or nil.
func (f *Face) Fallback() error { return f.FellBack }

// SetFallback records why an auto dial fell back to soft (under mu, as
// Stats may read it from the registry already).
func (f *Face) SetFallback(fb error) {
	f.Core.Mu.Lock()
	f.FellBack = fb
	f.Core.Mu.Unlock()
}

// SetDeadline sets the read and write deadlines.
func (f *Face) SetDeadline(t time.Time) error {
	return f.Core.SetDeadlines("set deadline", t, &f.Core.ReadDL, &f.Core.WriteDL)
}

// SetReadDeadline sets the deadline for Reads, pending ones included.
func (f *Face) SetReadDeadline(t time.Time) error {
	return f.Core.SetDeadlines("set read deadline", t, &f.Core.ReadDL, nil)
}

// SetWriteDeadline sets the deadline for Writes, pending ones included.
func (f *Face) SetWriteDeadline(t time.Time) error {
	return f.Core.SetDeadlines("set write deadline", t, &f.Core.WriteDL, nil)
}

// TrafficClass is what either wire's TrafficClass reports: the traffic
// class e's queue pair says its packets carry.
func (f *Face) TrafficClass(e *core.Endpoint) (int, error) {
	f.Core.Mu.Lock()
	defer f.Core.Mu.Unlock()
	if f.Core.Closed || f.Core.Torn {
		return 0, f.Core.OpErr("traffic class", net.ErrClosed)
	}
	a, err := e.QP.Query()
	if err != nil {
		return 0, f.Core.OpErr("traffic class", err)
	}
	return a.TrafficClass, nil
}

// CountRead counts a Read of n bytes on its rarer paths, which do not hold
// mu.
func (f *Face) CountRead(n int) {
	if n > 0 {
		f.Core.Mu.Lock()
		f.Core.Counters.ReadLocked(n)
		f.Core.Mu.Unlock()
	}
}

// Snapshot is Stats for either wire: what both count and their state,
// then what the wire adds under mu (locked, which returns the wire's
// failure, if any), then the path its queue pair e.QP runs on now, asked
// after letting go of mu.
func (f *Face) Snapshot(wire string, e *core.Endpoint, locked func(s *connstats.Snapshot, st *connstats.Counters) error) connstats.Snapshot {
	c, provider := &f.Core, f.Prov
	now := time.Now()
	st := c.Counters
	s := connstats.Snapshot{
		Provider:   provider,
		Wire:       wire,
		LocalAddr:  AddrString(c.Local),
		RemoteAddr: AddrString(c.Remote),

		RemoteWrites:       st.RemoteWrites.Load(),
		RemoteReads:        st.RemoteReads.Load(),
		RemoteBytesWritten: st.RemoteWritten.Load(),
		RemoteBytesRead:    st.RemoteRead.Load(),
		NotifiesSent:       st.NotesSent.Load(),
		NotifiesReceived:   st.NotesRecv.Load(),
		Exposures:          st.Exposures.Load(),
	}
	c.Mu.Lock()
	st.SeeLocked(now)
	s.BytesSent, s.BytesReceived, s.Writes = st.BytesSent, st.BytesRecv, st.Writes
	s.ReadsAtOnce, s.ReadsHanded, s.ReadsSpun, s.ReadsSlept = st.Reads[connstats.WaitNone], st.Reads[connstats.WaitHanded], st.Reads[connstats.WaitSpun], st.Reads[connstats.WaitSlept]
	s.Reads = s.ReadsAtOnce + s.ReadsHanded + s.ReadsSpun + s.ReadsSlept
	s.MessagesSent, s.MessagesReceived = st.MsgsSent, st.MsgsRecv
	s.CreditWaits, s.WriteWaitTime = st.CreditWaits, st.WriteWait
	s.Spins, s.SpinsCaught, s.SpinsRefused, s.Sleeps = st.Spins, st.Caught, st.Refused, st.Sleeps
	s.Opened, s.Closed = st.Opened, c.Closed
	s.SinceSent, s.SinceRecv = since(now, st.SeenSentAt), since(now, st.SeenRecvAt)
	if err := locked(&s, st); err != nil {
		s.Err = err.Error()
	}
	if f.FellBack != nil {
		s.Fallback = f.FellBack.Error()
	}
	qp := e.QP
	if c.Torn {
		qp = nil
	}
	c.Mu.Unlock()
	s.Path = PathOf(provider, qp)
	s.RTT, s.Retransmits = transportInfo(provider, qp)
	return s
}

func since(now, t time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return now.Sub(t)
}

// AddrString is a, or "" for none.
func AddrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// PathOf names what carries a connection's bytes: its provider, and for
// soft the transport its QP runs on now (shared memory or TCP; a
// connection may switch to shared memory after its handshake).
func PathOf(provider string, qp verbs.QP) string {
	if provider != soft.Name {
		return provider
	}
	if qp == nil {
		return ""
	}
	if c := soft.Carrier(qp); c != "" {
		return "soft-" + c
	}
	return soft.Name
}

// transportInfo is what the transport under qp says of itself: on soft's
// TCP path the kernel's round-trip time and retransmits (TCP_INFO).
func transportInfo(provider string, qp verbs.QP) (time.Duration, uint64) {
	if provider != soft.Name || qp == nil || soft.Carrier(qp) != "tcp" {
		return 0, 0
	}
	rtt, retrans, _ := soft.TCPInfo(qp)
	return rtt, retrans
}
