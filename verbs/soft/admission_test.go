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

// Slots are bounded in all and per host; a connection without one waits
// and is woken when one is given back.
func TestAdmissionSlots(t *testing.T) {
	cs, _ := admissionConns(t, 1, 1, 2, 3)
	a := newAdmission(2, 1)
	var e []*hsSlot
	for _, c := range cs {
		s, full := a.arrive(c)
		require.Nil(t, full)
		e = append(e, s)
	}
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
	assert.Empty(t, a.byHost)
	assert.Empty(t, a.waiting)

	// One that was ended is told so.
	s, _ := a.arrive(cs[0])
	a.release(s)
	ok, _ := a.take(s)
	assert.False(t, ok)
}

// With the waiting list full, a connection silent for silentAfter is ended
// for a newcomer; one whose request is there never is: the listener stops
// accepting until one moves on.
func TestAdmissionEndsOnlySilent(t *testing.T) {
	cs, ds := admissionConns(t, 1, 1, 1, 1, 1)
	a := newAdmission(1, 1)
	a.maxWaiting, a.silentAfter = 2, 50*time.Millisecond
	holder, _ := a.arrive(cs[0])
	ok, wait := a.take(holder)
	require.True(t, ok)
	require.Nil(t, wait)
	ready, _ := a.arrive(cs[1])
	ok, wait = a.take(ready) // its request is there; no slot free
	require.True(t, ok)
	require.NotNil(t, wait)
	silent, _ := a.arrive(cs[2])

	s, room := a.arrive(cs[3])
	require.Nil(t, s, "nobody has been silent long enough yet")
	require.NotNil(t, room)
	time.Sleep(2 * a.silentAfter)
	s, room = a.arrive(cs[3])
	require.NotNil(t, s, "the silent one makes room")
	require.Nil(t, room)
	ok, _ = a.take(silent)
	assert.False(t, ok, "the silent one was ended")
	require.NoError(t, ds[2].SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := ds[2].Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "its connection was closed")

	// Now the waiting are one with its request there and one that has
	// just come: neither is ended.
	a.silentAfter = 0
	require.NotNil(t, take1(t, a, s))
	s4, room := a.arrive(cs[4])
	require.Nil(t, s4, "only waiting connections with their requests there")
	a.release(holder)
	require.Nil(t, take1(t, a, ready))
	assert.True(t, isClosed(room), "one moved on")
	s4, room = a.arrive(cs[4])
	require.NotNil(t, s4)
	require.Nil(t, room)
}

func take1(t *testing.T, a *admission, s *hsSlot) <-chan struct{} {
	t.Helper()
	ok, wait := a.take(s)
	require.True(t, ok)
	return wait
}

// awaitRequest returns once a whole request has arrived, reading nothing,
// and at once for what cannot begin one.
func TestAwaitRequest(t *testing.T) {
	cs, ds := admissionConns(t, 1, 1)
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

	tr, err = newTCPTransport(cs[1])
	require.NoError(t, err)
	require.NoError(t, tr.setReadDeadline(time.Now().Add(5*time.Second)))
	_, err = ds[1].Write([]byte("GET / HTTP/1.1\r\n"))
	require.NoError(t, err)
	require.NoError(t, awaitRequest(tr))
	_, err = readHandshake(tr)
	assert.Error(t, err)
}
