package soft

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// admissionConns returns the accepted ends of TCP connections to one
// listener, the i-th dialled from 127.0.3.hosts[i], and the dialled ends.
func admissionConns(t *testing.T, hosts ...byte) (accepted []*net.TCPConn, dialled []*net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 3, 100)})
	require.NoError(t, err)
	defer ln.Close()
	for _, h := range hosts {
		d, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 3, h)}, ln.Addr().(*net.TCPAddr))
		require.NoError(t, err)
		a, err := ln.AcceptTCP()
		require.NoError(t, err)
		t.Cleanup(func() { d.Close(); a.Close() })
		accepted, dialled = append(accepted, a), append(dialled, d)
	}
	return accepted, dialled
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// newTestAdmission is an admission whose started connections are recorded
// in order, not run, and whose parked connections all have their requests
// there when looked at.
func newTestAdmission(maxSlots, perHost int) (*admission, *[]*hsSlot) {
	var started []*hsSlot
	a := newAdmission(maxSlots, perHost, func(e *hsSlot) { started = append(started, e) })
	a.peek = func(*hsSlot) bool { return true }
	return a, &started
}

// Slots are bounded in all and per host; a connection without one waits
// and is woken when one is given back.
func TestAdmissionSlots(t *testing.T) {
	cs, _ := admissionConns(t, 1, 1, 2, 3)
	a, started := newTestAdmission(2, 1)
	var e []*hsSlot
	for _, c := range cs {
		s := a.arrive(c)
		require.Equal(t, uint8(slotWaiting), s.state)
		e = append(e, s)
	}
	require.Equal(t, e, *started, "each started at once, in order")
	require.Nil(t, take1(t, a, e[0]), "a free slot")
	w1 := take1(t, a, e[1])
	require.NotNil(t, w1, "its host is at its limit")
	require.Nil(t, take1(t, a, e[2]), "another host")
	w3 := take1(t, a, e[3])
	require.NotNil(t, w3, "every slot is held")
	assert.Equal(t, 2, a.n)

	a.release(e[0])
	assert.True(t, isClosed(w1) && isClosed(w3), "a slot given back wakes who waits")
	require.Nil(t, take1(t, a, e[1]))
	require.NotNil(t, take1(t, a, e[3]), "every slot is held again")
	a.release(e[2])
	require.Nil(t, take1(t, a, e[3]))
	a.release(e[1])
	a.release(e[1]) // again: nothing more
	a.release(e[3])
	assert.Zero(t, a.n)
	assert.Empty(t, a.hosts)
	assert.Empty(t, a.waiting)

	// One that was ended is told so.
	s := a.arrive(cs[0])
	a.release(s)
	ok, _ := a.take(s)
	assert.False(t, ok)
}

// With the waiting places all taken, a connection silent for silentAfter
// is ended for a newcomer; one whose request is there never is: the
// newcomer is parked instead, and waits for its request once one has moved
// on.
func TestAdmissionEndsOnlySilent(t *testing.T) {
	cs, ds := admissionConns(t, 1, 1, 2, 2, 3)
	a, started := newTestAdmission(1, 1)
	a.maxWaiting, a.hostWaiting, a.silentAfter = 2, 2, 50*time.Millisecond
	holder := a.arrive(cs[0])
	require.Nil(t, take1(t, a, holder))
	ready := a.arrive(cs[1])
	require.NotNil(t, take1(t, a, ready), "its request is there; no slot free")
	silent := a.arrive(cs[2])

	s := a.arrive(cs[3])
	require.Equal(t, uint8(slotParked), s.state, "nobody has been silent long enough yet")
	time.Sleep(2 * a.silentAfter)
	s4 := a.arrive(cs[4])
	require.Equal(t, uint8(slotFree), silent.state, "the silent one was ended")
	require.NoError(t, ds[2].SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := ds[2].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "its connection was closed")
	// Its place went to a parked one: of the host with the fewest waiting
	// (127.0.3.2 and .3 have none; .2's came first).
	require.Equal(t, uint8(slotWaiting), s.state)
	require.Equal(t, uint8(slotParked), s4.state)
	require.Equal(t, []*hsSlot{holder, ready, silent, s}, *started)

	// Now the waiting are one with its request there and one that has
	// just come: neither is ended.
	a.silentAfter = 0
	require.NotNil(t, take1(t, a, s))
	s5 := a.arrive(cs[4])
	require.Equal(t, uint8(slotParked), s5.state, "only waiting connections with their requests there")
	a.release(holder)
	require.Nil(t, take1(t, a, ready), "a slot given back")
	require.Equal(t, uint8(slotWaiting), s4.state, "the place it left went to the oldest parked")
	require.Equal(t, uint8(slotParked), s5.state)
	a.release(ready)
	require.Nil(t, take1(t, a, s))
	require.Equal(t, uint8(slotWaiting), s5.state)
	require.Equal(t, []*hsSlot{holder, ready, silent, s, s4, s5}, *started)
}

// A host has at most hostWaiting waiting places: its newcomers beyond them
// are parked, without taking anything from another host, whose newcomer
// waits for its request at once; a host's silent connections do not make
// way for its own newcomers, however long they have waited, and a place
// that frees up goes to the host's oldest parked connection whose request
// is there.
func TestAdmissionPerHost(t *testing.T) {
	cs, _ := admissionConns(t, 1, 1, 1, 1, 2, 2, 1)
	a, _ := newTestAdmission(1, 1)
	a.maxWaiting, a.hostWaiting, a.silentAfter = 4, 2, time.Hour
	now := time.Now()
	a.now = func() time.Time { return now }
	var e []*hsSlot
	for _, c := range cs[:4] {
		e = append(e, a.arrive(c))
	}
	assert.Equal(t, []uint8{slotWaiting, slotWaiting, slotParked, slotParked},
		[]uint8{e[0].state, e[1].state, e[2].state, e[3].state})
	other := a.arrive(cs[4])
	assert.Equal(t, uint8(slotWaiting), other.state, "another host waits at once")

	now = now.Add(2 * time.Hour) // every connection has waited long enough
	e4 := a.arrive(cs[5])
	assert.Equal(t, uint8(slotWaiting), e4.state)
	assert.Equal(t, uint8(slotWaiting), other.state, "a host below its bound loses nothing")
	e5 := a.arrive(cs[6]) // 127.0.3.1 again, at its bound
	assert.Equal(t, uint8(slotParked), e5.state)
	assert.Equal(t, []uint8{slotWaiting, slotWaiting, slotParked, slotParked},
		[]uint8{e[0].state, e[1].state, e[2].state, e[3].state}, "its silent ones made no way for it")
	assert.False(t, a.giveWay(e[0]), "for its own parked connections")

	a.peek = func(s *hsSlot) bool { return s == e[3] }
	a.release(e[0])
	assert.Equal(t, uint8(slotWaiting), e[3].state, "the oldest parked one whose request is there")
	assert.Equal(t, uint8(slotParked), e[2].state)
	a.peek = func(*hsSlot) bool { return false }
	a.release(e[1])
	assert.Equal(t, uint8(slotWaiting), e[2].state, "with no request there, the oldest")
	assert.Equal(t, uint8(slotParked), e5.state)
}

// At most maxParked connections are parked: beyond, the host with the most
// of them gives up its newest, the newcomer if that host is its own.
func TestAdmissionParkedBound(t *testing.T) {
	cs, ds := admissionConns(t, 1, 1, 1, 2, 3, 3)
	a, _ := newTestAdmission(1, 1)
	a.maxWaiting, a.hostWaiting, a.maxParked, a.silentAfter = 1, 1, 3, time.Hour
	w := a.arrive(cs[0])
	require.Equal(t, uint8(slotWaiting), w.state)
	p1, p2, p3 := a.arrive(cs[1]), a.arrive(cs[2]), a.arrive(cs[3])
	require.Equal(t, 3, a.nParked)
	p4 := a.arrive(cs[4]) // 127.0.3.1 has the most parked: its newest goes
	assert.Equal(t, uint8(slotFree), p2.state)
	assert.Equal(t, []uint8{slotParked, slotParked, slotParked}, []uint8{p1.state, p3.state, p4.state})
	require.NoError(t, ds[2].SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := ds[2].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "its connection was closed")
	// Now each host has one parked: on a tie, the newcomer's host gives
	// up its newest, the newcomer.
	p5 := a.arrive(cs[5])
	assert.Equal(t, uint8(slotFree), p5.state)
	assert.Equal(t, 3, a.nParked)

	// Shut, the listener closes its parked connections and every newcomer.
	a.shut()
	assert.Zero(t, a.nParked)
	assert.Equal(t, uint8(slotFree), p1.state)
	assert.Equal(t, uint8(slotFree), a.arrive(cs[2]).state)
	a.release(w)
	assert.Empty(t, a.hosts)
}

func take1(t *testing.T, a *admission, s *hsSlot) <-chan struct{} {
	t.Helper()
	ok, wait := a.take(s)
	require.True(t, ok)
	return wait
}

// awaitRequest returns once a whole request has arrived, reading nothing,
// and at once for a header that cannot begin one (junk, a body too long).
func TestAwaitRequest(t *testing.T) {
	cs, ds := admissionConns(t, 1, 1, 1)
	tr, err := newTCPTransport(cs[0])
	require.NoError(t, err)
	req := RawREQ(1, nil) // TCP
	_, err = ds[0].Write(req[:hsHdrLen+2])
	require.NoError(t, err)
	require.NoError(t, tr.setReadDeadline(time.Now().Add(100*time.Millisecond)))
	require.ErrorIs(t, awaitRequest(tr), os.ErrDeadlineExceeded, "half a request")
	_, err = ds[0].Write(req[hsHdrLen+2:])
	require.NoError(t, err)
	require.NoError(t, tr.setReadDeadline(time.Now().Add(5*time.Second)))
	require.NoError(t, awaitRequest(tr))
	m, err := readHandshake(tr)
	require.NoError(t, err, "awaitRequest read nothing")
	assert.Equal(t, uint8(msgREQ), m.typ)

	for i, junk := range []string{"GET / HTTP/1.1\r\n", "SRDM\x01\x01\xff\xff"} {
		tr, err = newTCPTransport(cs[1+i])
		require.NoError(t, err)
		require.NoError(t, tr.setReadDeadline(time.Now().Add(5*time.Second)))
		_, err = ds[1+i].Write([]byte(junk))
		require.NoError(t, err)
		require.NoError(t, awaitRequest(tr), "%q", junk)
		_, err = readHandshake(tr)
		assert.Error(t, err)
	}
}

// When all places are taken, a connection that has waited silentAfter
// without its request gives its place up to another host's parked
// connection, if that host is below its bound, and only then.
func TestAdmissionSilentGiveWay(t *testing.T) {
	cs, ds := admissionConns(t, 1, 1, 2, 1, 2)
	a, started := newTestAdmission(1, 1)
	a.maxWaiting, a.hostWaiting = 2, 2
	now := time.Now()
	a.now = func() time.Time { return now }
	w1, w2 := a.arrive(cs[0]), a.arrive(cs[1])
	own := a.arrive(cs[3])
	require.Equal(t, []uint8{slotWaiting, slotWaiting, slotParked}, []uint8{w1.state, w2.state, own.state})
	now = now.Add(a.silentAfter)
	assert.False(t, a.giveWay(w1), "to its own host's parked connection")
	p := a.arrive(cs[2]) // another host: all places are taken, w1 has waited long enough
	require.Equal(t, uint8(slotWaiting), p.state, "given the place of the oldest silent one")
	require.Equal(t, uint8(slotFree), w1.state)
	require.NoError(t, ds[0].SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := ds[0].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "its connection was closed")

	// The next newcomer of that host ends w2 (p has not waited long
	// enough), whose host, with no place left then, gets the place back
	// for its parked connection: the host with the fewest places first.
	p2 := a.arrive(cs[4])
	require.Equal(t, uint8(slotFree), w2.state)
	require.Equal(t, uint8(slotWaiting), own.state)
	require.Equal(t, uint8(slotParked), p2.state)
	assert.False(t, a.giveWay(p), "to its own host's parked connection")
	assert.Equal(t, []*hsSlot{w1, w2, p, own}, *started)
}

// The admission's counters (ReadCounters) count what it did: connections
// parked, ones that waited for a slot (once each, however often woken),
// silent ones ended for a newcomer, parked ones dropped beyond the bound.
func TestAdmissionCounters(t *testing.T) {
	cs, _ := admissionConns(t, 1, 1, 2, 2, 3, 3, 4, 5)
	a, _ := newTestAdmission(1, 1)
	a.maxWaiting, a.hostWaiting, a.silentAfter = 2, 2, 50*time.Millisecond
	before := ReadCounters()
	holder := a.arrive(cs[0])
	require.Nil(t, take1(t, a, holder))
	ready := a.arrive(cs[1])
	require.NotNil(t, take1(t, a, ready), "no slot free: it waits")
	require.NotNil(t, take1(t, a, ready), "woken without a slot: waits again")
	silent := a.arrive(cs[2])
	s := a.arrive(cs[3])
	require.Equal(t, uint8(slotParked), s.state)
	time.Sleep(2 * a.silentAfter)
	s4 := a.arrive(cs[4])
	require.Equal(t, uint8(slotFree), silent.state, "the silent one was ended")
	require.Equal(t, uint8(slotParked), s4.state)
	a.maxParked = 1
	s5 := a.arrive(cs[5])
	require.Equal(t, uint8(slotFree), s5.state, "parked beyond the bound: dropped")

	got := ReadCounters()
	assert.Equal(t, uint64(3), got.AdmissionParked-before.AdmissionParked, "parked: s, s4, s5")
	assert.Equal(t, uint64(1), got.AdmissionSlotWaits-before.AdmissionSlotWaits)
	assert.Equal(t, uint64(1), got.AdmissionEvicted-before.AdmissionEvicted)
	assert.Equal(t, uint64(1), got.AdmissionDropped-before.AdmissionDropped)
	a.shut()

	// A silent one that gives its place up to another host's parked
	// connection is evicted too.
	a, _ = newTestAdmission(1, 1)
	a.maxWaiting, a.hostWaiting = 1, 1
	now := time.Now()
	a.now = func() time.Time { return now }
	before = ReadCounters()
	w := a.arrive(cs[6])
	p := a.arrive(cs[7])
	require.Equal(t, []uint8{slotWaiting, slotParked}, []uint8{w.state, p.state}, "nobody silent long enough yet")
	now = now.Add(a.silentAfter)
	require.True(t, a.giveWay(w))
	require.Equal(t, uint8(slotWaiting), p.state)
	got = ReadCounters()
	assert.Equal(t, uint64(1), got.AdmissionParked-before.AdmissionParked)
	assert.Equal(t, uint64(1), got.AdmissionEvicted-before.AdmissionEvicted)
	a.shut()
}
