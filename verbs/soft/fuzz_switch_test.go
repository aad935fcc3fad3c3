//go:build linux

package soft

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The reading side of a switching transport, as the fuzz target below
// sets it up.
const (
	switchNeither       = iota // neither side's role: the exchange is handed over by the test
	switchPassive              // the passive side: invited, it runs its exchange
	switchActiveWaiting        // the active side before it opened its offer and invited
	switchActiveInvited        // the active side, its offer open and invitation out
	switchRoles
)

// What becomes of the reading side's exchange.
const (
	exchangeNever  = iota // it never ends
	exchangeOK            // through, at once
	exchangeLater         // through, a little later, in another goroutine
	exchangeFailed        // failed
	exchangeModes
)

// FuzzSwitchControl plays whatever byte stream a peer sends on TCP to the
// reading side of a connection that is to move to shared memory (frames,
// switch control headers well-formed or not, invitations and markers in
// any order), on either side and whatever becomes of that side's ring
// exchange. Each read must end (no wait beyond switchWait), return the
// peer's frame headers as they were sent, run the exchange only on the
// passive side, once invited, once, and meet every control header as the
// switch's rules say: a malformed one, an invitation to the active side or
// a second one, a marker before the invitation, or frames after the
// marker on TCP are protocol errors; at a marker the reader moves to the
// ring if the exchange is through, and fails if it failed or is not
// through within switchWait.
func FuzzSwitchControl(f *testing.F) {
	frame := func(typ uint8, payload int) []byte {
		var h [hdrLen]byte
		(&header{typ: typ, psn: 1, len: uint32(payload)}).encode(&h)
		return append(h[:], make([]byte, payload)...)
	}
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	for role := range byte(switchRoles) {
		for x := range byte(exchangeModes) {
			f.Add(role, x, cat(frame(frameSend, 5), ctlHeader(shmInvite), frame(frameWrite, 40), ctlHeader(shmMarker)))
			f.Add(role, x, ctlHeader(shmMarker))
		}
	}
	f.Add(byte(switchPassive), byte(exchangeOK), cat(ctlHeader(shmInvite), ctlHeader(shmInvite)))
	f.Add(byte(switchPassive), byte(exchangeOK), cat(ctlHeader(shmInvite), ctlHeader(shmMarker), frame(frameSend, 1)))
	f.Add(byte(switchNeither), byte(exchangeOK), cat(ctlHeader(shmMarker)[:hdrLen-1], []byte{1}))
	f.Add(byte(switchActiveInvited), byte(exchangeLater), cat(frame(frameAck, 0), ctlHeader(2)))

	prev := switchWait
	switchWait = 20 * time.Millisecond
	f.Cleanup(func() { switchWait = prev })
	f.Fuzz(func(t *testing.T, role, mode byte, stream []byte) {
		role %= switchRoles
		mode %= exchangeModes
		if len(stream) > 64<<10 {
			return
		}
		peer, ours := tcpPair(t)
		tr, err := newTCPTransport(ours)
		require.NoError(t, err)
		x := newShmExchange()
		var ra, rb shmResult
		if mode == exchangeOK || mode == exchangeLater {
			ra, rb = exchangedRings(t, shmRingMin)
		}
		delivered, later := false, make(chan struct{})
		deliver := func() {
			delivered = true
			switch mode {
			case exchangeOK:
				x.deliver(ra)
			case exchangeLater:
				go func() {
					defer close(later)
					time.Sleep(time.Millisecond)
					x.deliver(ra)
				}()
			case exchangeFailed:
				x.deliver(shmResult{err: errShmSetup})
			}
		}
		s := newSwitchTransport(tr, x)
		answered := 0
		switch role {
		case switchPassive:
			s.answer = func() {
				answered++
				deliver()
			}
		case switchActiveWaiting, switchActiveInvited:
			// An offer that never opens its socket: the threshold is out
			// of reach, and the invited side's counts as opened already.
			s.offer, s.rule = &shmOffer{x: x}, switchRule{bytes: 1 << 62}
			s.started.Store(role == switchActiveInvited)
		}
		if role != switchPassive {
			deliver()
		}
		// The peer's end of the rings, all it ever writes there sent:
		// after a switch our ring reads end at once.
		var peerRing *shmTransport
		if rb.local != nil {
			peerRing, err = newShmTransport(peer, rb.local, rb.peer)
			require.NoError(t, err)
			require.NoError(t, peerRing.closeWrite())
		}
		defer func() {
			require.NoError(t, s.close())
			if peerRing != nil {
				peerRing.close()
			}
			switch {
			case !delivered:
				ra.free()
			case mode == exchangeLater:
				<-later // the result is in, or freed as dropped
			}
		}()
		if _, err := peer.Write(stream); err != nil {
			t.Fatal(err)
		}
		require.NoError(t, peer.CloseWrite())
		require.NoError(t, s.setReadDeadline(time.Now().Add(10*time.Second)))

		// The reader's expected course through the stream.
		invited, switched := false, false
		p := 0
		var h [hdrLen]byte
		for i := 0; ; i++ {
			require.Less(t, i, 1<<12)
			err := s.readHeader(&h)
			require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "a read waited on a stream all sent")
			if switched {
				// Our ring, on which the peer sent nothing.
				require.ErrorIs(t, err, io.EOF)
				return
			}
			// Skip the invitation, as the reader did.
			for role == switchPassive && !invited && len(stream)-p >= hdrLen &&
				[hdrLen]byte(stream[p:p+hdrLen]) == [hdrLen]byte(ctlHeader(shmInvite)) {
				invited = true
				p += hdrLen
			}
			if len(stream)-p < hdrLen {
				require.Error(t, err, "a header beyond the stream")
				require.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "%v", err)
				return
			}
			want := [hdrLen]byte(stream[p : p+hdrLen])
			p += hdrLen
			if want[0] != frameShmSwitch {
				require.NoError(t, err)
				require.Equal(t, want, h, "a frame header not as sent")
				var d header
				if d.decode(&h) != nil {
					return // the engine ends the connection here
				}
				n := d.payloadLen()
				err := s.discard(n)
				if n > len(stream)-p {
					require.Error(t, err)
					return
				}
				require.NoError(t, err)
				p += n
				continue
			}
			if !isShmSwitch(&want) || want[1] == shmInvite ||
				role == switchPassive && !invited || role == switchActiveWaiting {
				require.ErrorIs(t, err, errProtocol, "control header %x", want[:2])
				return
			}
			// A marker where one may come.
			if p < len(stream) && errors.Is(err, errProtocol) {
				return // frames after it, on TCP, seen as it was read
			}
			switch mode {
			case exchangeNever:
				require.ErrorIs(t, err, errSwitchWait)
				return
			case exchangeFailed:
				require.ErrorIs(t, err, errShmSwitch)
				return
			case exchangeLater:
				if errors.Is(err, errSwitchWait) {
					return // not through within switchWait, on a busy host
				}
			}
			// Through: the header read came from the ring, which ended.
			require.ErrorIs(t, err, io.EOF)
			require.True(t, s.rdOn.Load(), "read past a marker without moving to the ring")
			switched = true
			return
		}
	})
}

func ctlHeader(kind byte) []byte {
	var h [hdrLen]byte
	h[0], h[1] = frameShmSwitch, kind
	return h[:]
}

// FuzzSwitchStream streams frames both ways through two switching
// transports, in batches and partial writes of a fuzzed pattern, while the
// sides' exchanges come through (or fail) at fuzzed frames, with or
// without the invitation (A the active side that invites B at its frame,
// B the passive side that then runs its exchange). Whatever the order, the
// control headers go out only between frames: every frame arrives whole
// and in order, B is invited at most once, and each side ends on the
// rings if the exchanges came through and on TCP if they failed.
func FuzzSwitchStream(f *testing.F) {
	f.Add(int64(1), uint8(200), uint8(60), uint8(100), uint8(0))
	f.Add(int64(2), uint8(50), uint8(0), uint8(0), uint8(1))
	f.Add(int64(3), uint8(120), uint8(119), uint8(3), uint8(1))
	f.Add(int64(4), uint8(80), uint8(10), uint8(70), uint8(2))
	f.Fuzz(func(t *testing.T, pattern int64, n, atA, atB, mode uint8) {
		frames := int(n)
		if frames == 0 {
			return
		}
		atA, atB = min(atA, n-1), min(atB, n-1)
		invited, fail := mode&1 != 0, mode&2 != 0
		a, b, xa, xb := switchPair(t)
		var ra, rb shmResult
		if !fail {
			ra, rb = exchangedRings(t, shmRingMin)
		}
		deliver := func(x *shmExchange, r shmResult) {
			if fail {
				x.deliver(shmResult{err: errShmSetup})
				return
			}
			x.deliver(r)
		}
		var answered atomic.Int32
		bDone := make(chan struct{})
		if invited {
			// A's invitation is to go out at its frame atA; B runs its
			// exchange when it reads it.
			a.offer, a.rule = &shmOffer{x: xa}, switchRule{bytes: 1 << 62}
			a.started.Store(true)
			b.answer = func() {
				answered.Add(1)
				go func() {
					defer close(bDone)
					deliver(xb, rb)
				}()
			}
		}
		var once [2]sync.Once
		streamBoth(t, a, b, frames, func(side, i int) {
			switch {
			case side == 0 && i == int(atA):
				once[0].Do(func() {
					if invited {
						a.invite.Store(true)
						a.trySend()
					}
					deliver(xa, ra)
				})
			case side == 1 && i == int(atB) && !invited:
				once[1].Do(func() {
					defer close(bDone)
					deliver(xb, rb)
				})
			}
		})
		// A short stream more: the invitation, and each side's marker, if
		// due, is out by its end.
		streamBoth(t, a, b, 20, nil)
		<-bDone
		require.LessOrEqual(t, answered.Load(), int32(1), "invited twice")
		if invited {
			require.Equal(t, int32(1), answered.Load(), "the invitation never arrived")
		}
		streamBoth(t, a, b, 20, nil)
		want := "shm"
		if fail {
			want = "tcp"
		}
		require.Equal(t, want, a.carrier())
		require.Equal(t, want, b.carrier())
	})
}
