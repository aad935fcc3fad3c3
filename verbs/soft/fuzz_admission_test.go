package soft

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzAwaitRequest: for whatever bytes have arrived on a connection to a
// listener, the wait for its request (awaitRequest, the peek) ends as the
// read that follows needs, which must not wait on the peer (it runs in a
// handshake slot): once the whole message is there (the read then takes
// only bytes that have arrived) or once a header is there that cannot
// begin one (the read then fails at once), and only then. More bytes only
// ever end a wait.
func FuzzAwaitRequest(f *testing.F) {
	req := RawREQ(transportTCP, nil)
	f.Add(req)
	f.Add(req[:hsHdrLen+2])
	f.Add(req[:3])
	f.Add(append(bytes.Clone(req), 0xff))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte("SRDM\x01\x01\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || len(b) > hsHdrLen+maxHandshakeBody {
			return // nothing peeked: the connection's end; more: never peeked
		}
		done := requestArrived(b)
		for k := 1; k < len(b); k++ {
			if requestArrived(b[:k]) {
				require.True(t, done, "a wait over at %d bytes resumed at %d", k, len(b))
				break
			}
		}
		if len(b) < hsHdrLen {
			require.False(t, done, "a wait over with less than a header there")
		} else if _, body, err := parseHandshakeHeader(b[:hsHdrLen]); err != nil {
			require.True(t, done, "waits on a header that cannot be")
		} else {
			require.Equal(t, len(b) >= hsHdrLen+body, done, "a %d-byte body, %d bytes there", body, len(b))
		}

		peer, ours := tcpConnPair(t)
		tr, err := newTCPTransport(ours)
		require.NoError(t, err)
		defer tr.close()
		_, err = peer.Write(b)
		require.NoError(t, err)
		if !done {
			require.NoError(t, tr.setReadDeadline(time.Now().Add(2*time.Millisecond)))
			require.ErrorIs(t, awaitRequest(tr), os.ErrDeadlineExceeded, "the wait ended on %q", b)
			return
		}
		require.NoError(t, tr.setReadDeadline(time.Now().Add(10*time.Second)))
		require.NoError(t, awaitRequest(tr))
		// The peer sends nothing more, and does not close: a read that
		// waited would end only at this deadline.
		require.NoError(t, tr.setReadDeadline(time.Now().Add(5*time.Second)))
		start := time.Now()
		_, err = readHandshake(tr)
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the read waited on the peer")
		require.Less(t, time.Since(start), time.Second)
	})
}

// tcpConnPair is two ends of a loopback TCP connection, closed at cleanup.
func tcpConnPair(t *testing.T) (dialled, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 3, 200)})
	require.NoError(t, err)
	defer ln.Close()
	dialled, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	accepted, err = ln.AcceptTCP()
	require.NoError(t, err)
	t.Cleanup(func() { dialled.Close(); accepted.Close() })
	return dialled, accepted
}

// FuzzAdmission runs a listener's admission through whatever sequence of
// arrivals (from a few hosts), requests coming in, waits given up, places
// given back, the clock moving on and the listener shutting, and checks
// after each step that its bounds hold and its books are right, that a
// place goes to the oldest parked connection of its host whose request is
// there (or else the oldest), and that it ended no connection it must not.
// It may end: a waiting connection that has waited silentAfter without its
// request, when all places are taken, for a newcomer of a host below its
// bound, or when it gives way to another host's parked connection below its
// bound; when too many are parked, the newest of the host with the most
// (the newcomer on a tie); any connection whose place is given back; the
// parked ones and every newcomer once shut. Nothing else: a waiting one
// whose request is there only when its place is given back.
func FuzzAdmission(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 2, 1, 0, 2, 0, 3, 20, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 3}, 40))
	f.Add(bytes.Repeat([]byte{0, 1, 1, 0, 0, 2, 3, 7, 2, 1}, 10))
	f.Add(append(bytes.Repeat([]byte{0, 0, 0, 1, 0, 2, 0, 3}, 6), 5, 0, 0, 1))
	f.Add(append(bytes.Repeat([]byte{0, 0, 0, 4}, 8), 4, 20, 6, 0, 6, 1, 6, 2, 0, 0))
	// A newcomer whose waiting place is that of its host's last connection.
	f.Add([]byte("01X00202000001"))
	// A place that goes to a newer parked connection whose request is there.
	f.Add([]byte("10101012101117C000111212"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		now := time.Unix(1000, 0)
		var (
			all     []*hsSlot // every connection that arrived, in order
			started []*hsSlot
		)
		a := newAdmission(2, 1, func(e *hsSlot) { started = append(started, e) })
		a.maxWaiting, a.hostWaiting, a.maxParked, a.silentAfter = 5, 2, 4, 100*time.Millisecond
		a.now = func() time.Time { return now }
		// The requests of every third connection are there when looked at
		// (the newcomer's too, looked at before it is in all).
		order := map[*hsSlot]int{}
		silent := func(e *hsSlot) bool {
			i, ok := order[e]
			if !ok {
				i = len(all)
				order[e] = i
			}
			return i%3 != 0
		}
		a.peek = func(e *hsSlot) bool { return !silent(e) }
		hosts := []netip.Addr{
			netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"),
			netip.MustParseAddr("2001:db8::"), netip.MustParseAddr("192.0.2.4"),
		}
		wasStarted := map[*hsSlot]bool{}
		for len(ops) >= 2 {
			op, arg := ops[0]%7, int(ops[1])
			ops = ops[2:]
			before := make([]uint8, len(all))
			for i, e := range all {
				before[i] = e.state
			}
			parkedBefore, waitingBefore := map[netip.Addr]int{}, map[netip.Addr]int{}
			for _, h := range a.hosts {
				parkedBefore[h.host], waitingBefore[h.host] = len(h.parked), h.waiting
			}
			nWaitingBefore, nParkedBefore, closedBefore := len(a.waiting), a.nParked, a.closed
			var (
				host     netip.Addr
				target   *hsSlot // the connection the step is about
				gaveWay  bool
				newcomer *hsSlot
			)
			if len(all) > 0 {
				target = all[arg%len(all)]
			}
			switch op {
			case 0, 1: // a connection arrives
				host = hosts[arg%len(hosts)]
				newcomer = a.admit(new(net.TCPConn), host)
				all = append(all, newcomer)
				before = append(before, slotParked)
				room := waitingBefore[host] < a.hostWaiting && nWaitingBefore < a.maxWaiting
				if room && parkedBefore[host] == 0 && !closedBefore {
					require.Equal(t, uint8(slotWaiting), newcomer.state, "no waiting place with room for it")
				}
				if newcomer.state == slotFree && !closedBefore {
					require.Equal(t, a.maxParked, nParkedBefore, "a newcomer closed with parking places free")
					for h, n := range parkedBefore {
						require.LessOrEqual(t, n, parkedBefore[host]+1, "a newcomer closed though %v has more parked", h)
					}
				}
			case 2: // a connection's request is there
				if target != nil {
					ok, _ := a.take(target)
					b := before[slices.Index(all, target)]
					require.Equal(t, b == slotWaiting || b == slotReady, ok)
				}
			case 3: // a place is given back
				if target != nil {
					a.release(target)
				}
			case 4: // time passes
				now = now.Add(time.Duration(arg) * 10 * time.Millisecond)
			case 5:
				if arg == 0 {
					a.shut()
				}
			case 6: // a waiting connection, silentAfter after it started waiting
				if target != nil && target.state == slotWaiting && now.Sub(target.since) >= a.silentAfter {
					gaveWay = a.giveWay(target)
					other := false
					for h, n := range parkedBefore {
						other = other || n > 0 && h != target.host && waitingBefore[h] < a.hostWaiting
					}
					require.Equal(t, other, gaveWay, "gave way, or not, with another host's parked below its bound or not")
				}
			}
			for i, e := range all {
				if e.state != slotFree || before[i] == slotFree || e == newcomer && e.state == slotFree {
					continue
				}
				if e == target && (op == 3 || op == 6 && gaveWay) || a.closed && !closedBefore && before[i] == slotParked {
					continue
				}
				switch before[i] {
				case slotWaiting:
					require.True(t, op <= 1, "a waiting connection ended on step %d", op)
					require.Equal(t, a.maxWaiting, nWaitingBefore, "ended a connection with places free")
					require.Less(t, waitingBefore[host], a.hostWaiting, "ended a connection for a host at its bound")
					require.GreaterOrEqual(t, now.Sub(e.since), a.silentAfter, "ended a connection waiting for less than silentAfter")
				case slotParked:
					// Parked beyond the bound: the host with the most,
					// counting the newcomer, loses its newest, the
					// newcomer on a tie.
					require.True(t, op <= 1, "a parked connection ended on step %d", op)
					require.Equal(t, a.maxParked, nParkedBefore)
					require.NotEqual(t, host, e.host, "an older parked connection of the newcomer's host ended")
					lost := parkedBefore[e.host]
					require.Less(t, parkedBefore[host]+1, lost, "%v lost one though the newcomer's host has as many", e.host)
					for h, n := range parkedBefore {
						require.LessOrEqual(t, n, lost, "%v lost one though %v has more", e.host, h)
					}
				default:
					t.Fatalf("step %d ended a connection in state %d", op, before[i])
				}
			}
			for _, e := range started {
				require.False(t, wasStarted[e], "started twice")
				wasStarted[e] = true
				// Of its host's connections still parked, none came
				// before it with its request there, nor, if its request
				// was not there, with it there or before it at all.
				for _, x := range all {
					if x.state != slotParked || x.host != e.host {
						continue
					}
					older := slices.Index(all, x) < slices.Index(all, e)
					require.False(t, older && !silent(x), "passed over an older parked connection with its request there")
					require.False(t, silent(e) && (older || !silent(x)), "a silent one started before one whose request is there")
				}
			}
			started = started[:0]
			checkAdmission(t, a, all, wasStarted)
		}
	})
}

// checkAdmission checks a's bounds and books against the states of all
// the connections that arrived, and that every connection that has had a
// waiting place was started, and no other.
func checkAdmission(t *testing.T, a *admission, all []*hsSlot, started map[*hsSlot]bool) {
	t.Helper()
	waiting, parked, held := map[netip.Addr]int{}, map[netip.Addr]int{}, map[netip.Addr]int{}
	nWaiting, nParked, nHeld := 0, 0, 0
	for _, e := range all {
		switch e.state {
		case slotWaiting, slotReady:
			waiting[e.host]++
			nWaiting++
			require.True(t, started[e], "waiting but not started")
		case slotParked:
			parked[e.host]++
			nParked++
			require.False(t, started[e], "parked but started")
		case slotHeld:
			held[e.host]++
			nHeld++
			require.True(t, started[e], "holding a slot but not started")
		}
	}
	require.LessOrEqual(t, nWaiting, a.maxWaiting)
	require.LessOrEqual(t, nParked, a.maxParked)
	require.LessOrEqual(t, nHeld, a.max)
	require.Equal(t, nWaiting, len(a.waiting))
	require.Equal(t, nParked, a.nParked)
	require.Equal(t, nHeld, a.n)
	withParked := 0
	for k, h := range a.hosts {
		require.Equal(t, k, h.host)
		require.Equal(t, waiting[k], h.waiting, "%v waiting", k)
		require.Equal(t, parked[k], len(h.parked), "%v parked", k)
		require.Equal(t, held[k], h.held, "%v held", k)
		require.LessOrEqual(t, h.waiting, a.hostWaiting)
		require.LessOrEqual(t, h.held, a.perHost)
		require.True(t, h.waiting+h.held+len(h.parked) > 0, "%v holds nothing", k)
		if len(h.parked) > 0 {
			withParked++
			require.Contains(t, a.parked, h)
			require.True(t, a.closed || h.waiting >= a.hostWaiting || len(a.waiting) >= a.maxWaiting,
				"%v has connections parked with a waiting place free", k)
		}
	}
	require.Len(t, a.parked, withParked)
	for k := range waiting {
		require.Contains(t, a.hosts, k)
	}
	if a.closed {
		require.Zero(t, a.nParked)
	}
}
