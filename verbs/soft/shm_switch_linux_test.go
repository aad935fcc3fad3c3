//go:build linux

package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rdmanet/rdma/verbs"
	"github.com/rdmanet/rdma/verbs/verbstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// exchangedRings runs the ring exchange between two sides over a socket
// pair, as the CM does over its unix socket, and returns each side's
// result, not yet handed to anyone.
func exchangedRings(t *testing.T, size int) (ra, rb shmResult) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	ua, ub := unixConnOf(t, fds[0]), unixConnOf(t, fds[1])
	defer ua.Close()
	defer ub.Close()
	la, err := newShmLocal(size)
	require.NoError(t, err)
	lb, err := newShmLocal(size)
	require.NoError(t, err)
	require.NoError(t, sendSetup(ua, la))
	pb, err := recvSetup(ub, size)
	require.NoError(t, err)
	require.NoError(t, sendSetup(ub, lb))
	pa, err := recvSetup(ua, size)
	require.NoError(t, err)
	return shmResult{local: la, peer: pa}, shmResult{local: lb, peer: pb}
}

// switchPair returns two switching transports over a loopback TCP
// connection, each with an exchange whose result the test hands over.
func switchPair(t *testing.T) (a, b *switchTransport, xa, xb *shmExchange) {
	t.Helper()
	ca, cb := tcpPair(t)
	ta, err := newTCPTransport(ca)
	require.NoError(t, err)
	tb, err := newTCPTransport(cb)
	require.NoError(t, err)
	xa, xb = newShmExchange(), newShmExchange()
	a, b = newSwitchTransport(ta, xa), newSwitchTransport(tb, xb)
	t.Cleanup(func() { a.close(); b.close() })
	return a, b, xa, xb
}

// streamFrames writes n frames on tr as the engine does: batches of whole
// frames, each written without waiting, the rest of a short write then
// written waiting. Frame i has PSN i and a payload of a size and bytes
// derived from i. at(i) runs after frame i went out; it returns the
// number of the first frame written after tr's sending side switched (n
// if it never did).
func streamFrames(tr transport, n int, pattern int64, at func(i int)) (int, error) {
	rng := rand.New(rand.NewSource(pattern))
	hdrs := make([][hdrLen]byte, 4)
	payloads := make([][]byte, 4)
	var v [][]byte
	switched := n
	sw, _ := tr.(*switchTransport)
	for i := 0; i < n; {
		k := min(1+rng.Intn(4), n-i)
		v = v[:0]
		for j := 0; j < k; j++ {
			size := frameSize(i + j)
			(&header{typ: frameSend, psn: uint32(i + j), len: uint32(size)}).encode(&hdrs[j])
			if cap(payloads[j]) < size {
				payloads[j] = make([]byte, size)
			}
			p := payloads[j][:size]
			fillFrame(p, i+j)
			v = append(v, hdrs[j][:])
			if size > 0 {
				v = append(v, p)
			}
		}
		if sw != nil && switched == n && sw.wr.Load() != nil {
			switched = i
		}
		w, err := tr.writev(v, nil, false)
		if err != nil {
			return switched, err
		}
		if rest := trimVec(v, w); len(rest) > 0 {
			if _, err := tr.writev(rest, nil, true); err != nil {
				return switched, err
			}
		}
		for j := 0; j < k; j++ {
			if at != nil {
				at(i + j)
			}
		}
		i += k
	}
	return switched, nil
}

func frameSize(i int) int {
	switch i % 7 {
	case 0:
		return 0
	case 1:
		return 40 << 10
	}
	return (i * 977) % 9000
}

func fillFrame(p []byte, i int) {
	for k := range p {
		p[k] = byte(i*31 + k)
	}
}

// readFrames reads n frames from tr and checks each: PSN, size, bytes.
func readFrames(tr transport, n int) error {
	var h [hdrLen]byte
	buf := make([]byte, 64<<10)
	want := make([]byte, 64<<10)
	for i := 0; i < n; i++ {
		if err := tr.readHeader(&h); err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		var d header
		if err := d.decode(&h); err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		if d.psn != uint32(i) || int(d.len) != frameSize(i) {
			return fmt.Errorf("frame %d: PSN %d, %d bytes", i, d.psn, d.len)
		}
		p := buf[:d.len]
		if err := tr.readPayload(p, gateRef{}); err != nil {
			return fmt.Errorf("frame %d payload: %w", i, err)
		}
		fillFrame(want[:d.len], i)
		if string(p) != string(want[:d.len]) {
			return fmt.Errorf("frame %d: payload differs", i)
		}
	}
	return nil
}

// streamBoth streams n frames each way between a and b, calling at with
// the writer's side and frame number; it returns at which frame each
// writer found its sending side switched.
func streamBoth(t *testing.T, a, b transport, n int, at func(side, i int)) (switchedA, switchedB int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for side, tr := range []transport{a, b} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			sw, err := streamFrames(tr, n, int64(side), func(i int) {
				if at != nil {
					at(side, i)
				}
			})
			if side == 0 {
				switchedA = sw
			} else {
				switchedB = sw
			}
			errs <- err
		}()
		go func() {
			defer wg.Done()
			errs <- readFrames([]transport{b, a}[side], n)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return switchedA, switchedB
}

// Each direction switches at a frame boundary while a stream runs both
// ways: frames written before, across and after each marker arrive whole
// and in order. A's exchange finishes a third of the way in, B's later,
// so that B's reader meets A's marker before its own exchange is through
// and waits for it; the carrier then says shared memory on both ends.
func TestSwitchTransportMidStream(t *testing.T) {
	a, b, xa, xb := switchPair(t)
	ra, rb := exchangedRings(t, shmRingMin) // small rings: the stream wraps them
	const n = 3000
	var once [2]sync.Once
	swA, swB := streamBoth(t, a, b, n, func(side, i int) {
		switch {
		case side == 0 && i == n/3:
			once[0].Do(func() { xa.deliver(ra) })
		case side == 1 && i == n/2:
			once[1].Do(func() { xb.deliver(rb) })
		}
	})
	t.Logf("A's sending side switched at frame %d, B's at %d", swA, swB)
	assert.Greater(t, swA, n/3, "A switched before its exchange was through")
	assert.Less(t, swA, n, "A never switched")
	assert.Greater(t, swB, n/2, "B switched before its exchange was through")
	assert.Less(t, swB, n, "B never switched")
	assert.Equal(t, "shm", a.carrier())
	assert.Equal(t, "shm", b.carrier())
	// And on shared memory from then on.
	streamBoth(t, a, b, 200, nil)
}

// An exchange's result that is in before the transport starts switches
// the sending side at once, before any frame: the whole stream goes
// through the rings.
func TestSwitchTransportReadyAtStart(t *testing.T) {
	ca, cb := tcpPair(t)
	ta, err := newTCPTransport(ca)
	require.NoError(t, err)
	tb, err := newTCPTransport(cb)
	require.NoError(t, err)
	ra, rb := exchangedRings(t, shmRingMin)
	xa, xb := newShmExchange(), newShmExchange()
	xa.deliver(ra)
	xb.deliver(rb)
	a, b := newSwitchTransport(ta, xa), newSwitchTransport(tb, xb)
	defer a.close()
	defer b.close()
	require.NotNil(t, a.wr.Load(), "the marker went out with the transport's start")
	swA, swB := streamBoth(t, a, b, 300, nil)
	assert.Zero(t, swA)
	assert.Zero(t, swB)
	assert.Equal(t, "shm", a.carrier())
	assert.Equal(t, "shm", b.carrier())
}

// A failed exchange keeps that side's sending direction on TCP, with the
// data intact: here A's failed and B's never finishes (nor fails). Closing
// frees B's result when it finally comes.
func TestSwitchTransportFailedExchangeStaysOnTCP(t *testing.T) {
	before := ringsOpen(t)
	a, b, xa, xb := switchPair(t)
	ra, rb := exchangedRings(t, shmRingMin)
	ra.free()
	xa.deliver(shmResult{err: errShmSetup})
	swA, swB := streamBoth(t, a, b, 1000, nil)
	assert.Equal(t, 1000, swA, "A switched without its exchange")
	assert.Equal(t, 1000, swB, "B switched without its exchange")
	assert.Equal(t, "tcp", a.carrier())
	assert.Equal(t, "tcp", b.carrier())
	a.close()
	b.close()
	xb.deliver(rb) // after close: freed by the exchange
	assert.Equal(t, before, ringsOpen(t))
}

// A marker that arrives when this side's exchange failed ends the
// connection with an error that says so, without a hang; nothing is left
// open afterwards.
func TestSwitchTransportMarkerWithFailedExchange(t *testing.T) {
	fdsBefore := openFDs(t)
	ringsBefore := ringsOpen(t)
	a, b, xa, xb := switchPair(t)
	ra, rb := exchangedRings(t, shmRingMin)
	// B holds A's ring and eventfd; A's own exchange failed after it
	// sent them (it keeps nothing).
	ra.free()
	xa.deliver(shmResult{err: errShmSetup})
	xb.deliver(rb)
	require.NotNil(t, b.wr.Load(), "B's marker went out")
	var h [hdrLen]byte
	errc := make(chan error, 1)
	go func() { errc <- a.readHeader(&h) }()
	select {
	case err := <-errc:
		require.Error(t, err)
		assert.True(t, errors.Is(err, errShmSwitch), "%v", err)
		assert.Contains(t, err.Error(), errShmSetup.Error())
	case <-time.After(10 * time.Second):
		t.Fatal("the reader hangs at a marker it cannot follow")
	}
	a.close()
	b.close()
	require.True(t, eventually(func() bool { return openFDs(t) == fdsBefore }),
		"%d descriptors open, %d before", openFDs(t), fdsBefore)
	assert.Equal(t, ringsBefore, ringsOpen(t))
}

// A marker that is not one (other bytes set) is a protocol error, and so
// is anything after a marker on TCP.
func TestSwitchTransportBadMarker(t *testing.T) {
	for name, tail := range map[string][]byte{
		"flags set":      {frameShmSwitch, 1},
		"bytes after it": append(append([]byte{frameShmSwitch}, make([]byte, hdrLen-1)...), 1, 2, 3),
		"length in header": func() []byte {
			b := make([]byte, hdrLen)
			b[0] = frameShmSwitch
			binary.LittleEndian.PutUint32(b[12:], 8)
			return b
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			ca, cb := tcpPair(t)
			tb, err := newTCPTransport(cb)
			require.NoError(t, err)
			xb := newShmExchange()
			b := newSwitchTransport(tb, xb)
			defer b.close()
			_, rb := exchangedRings(t, shmRingMin)
			xb.deliver(rb)
			msg := append([]byte(nil), tail...)
			if len(msg) < hdrLen {
				msg = append(msg, make([]byte, hdrLen-len(msg))...)
			}
			_, err = ca.Write(msg)
			require.NoError(t, err)
			var h [hdrLen]byte
			require.NoError(t, b.setReadDeadline(time.Now().Add(10*time.Second)))
			err = b.readHeader(&h)
			assert.ErrorIs(t, err, errProtocol)
		})
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// unixConnOf wraps one end of a socket pair.
func unixConnOf(t *testing.T, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "unix")
	c, err := net.FileConn(f)
	f.Close()
	require.NoError(t, err)
	return c.(*net.UnixConn)
}

// The sending side switches only at a frame boundary: with a frame only
// partly taken by the socket when the exchange finishes (the socket empty
// again by then, so that a marker would fit), the marker waits until the
// rest of the frame is written (by the waiting call that follows, as the
// engine's sender does), and the frame arrives whole.
func TestSwitchTransportWaitsForFrameEnd(t *testing.T) {
	ca, cb := tcpPair(t)
	require.NoError(t, ca.SetWriteBuffer(64<<10))
	require.NoError(t, cb.SetReadBuffer(64<<10))
	ta, err := newTCPTransport(ca)
	require.NoError(t, err)
	tb, err := newTCPTransport(cb)
	require.NoError(t, err)
	xa, xb := newShmExchange(), newShmExchange()
	a, b := newSwitchTransport(ta, xa), newSwitchTransport(tb, xb)
	defer a.close()
	defer b.close()
	ra, rb := exchangedRings(t, shmRingMin)
	xb.deliver(rb)

	const big = 2 << 20
	frame := func(i int) [][]byte {
		var h [hdrLen]byte
		p := make([]byte, big)
		fillFrame(p, i)
		(&header{typ: frameSend, psn: uint32(i), len: big}).encode(&h)
		return [][]byte{h[:], p}
	}
	v := frame(0)
	n, err := a.writev(v, nil, false)
	require.NoError(t, err)
	require.Less(t, n, hdrLen+big, "the socket took the whole frame: no partial write to test")

	// The reader takes what is in flight (part of frame 0) and waits for
	// the rest.
	got := make(chan error, 1)
	go func() {
		var h [hdrLen]byte
		p := make([]byte, big)
		want := make([]byte, big)
		for i := 0; i < 2; i++ {
			var d header
			if err := b.readHeader(&h); err != nil {
				got <- err
				return
			}
			if err := d.decode(&h); err != nil || d.psn != uint32(i) || d.len != big {
				got <- fmt.Errorf("frame %d: %+v %v", i, d, err)
				return
			}
			if err := b.readPayload(p, gateRef{}); err != nil {
				got <- err
				return
			}
			fillFrame(want, i)
			if string(p) != string(want) {
				got <- fmt.Errorf("frame %d: payload differs", i)
				return
			}
		}
		got <- nil
	}()
	rc, err := ca.SyscallConn()
	require.NoError(t, err)
	require.True(t, eventually(func() bool {
		queued := -1
		_ = rc.Control(func(fd uintptr) { queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		return queued == 0
	}), "the socket's send queue never drained")

	xa.deliver(ra) // the exchange is through while the frame is half out
	require.True(t, a.wr.Load() == nil, "switched inside a frame")
	wrote := make(chan error, 1)
	go func() {
		_, err := a.writev(trimVec(v, n), nil, true)
		if err == nil && a.wr.Load() == nil {
			err = errors.New("no switch after the frame ended")
		}
		if err == nil {
			_, err = a.writev(frame(1), nil, true)
		}
		wrote <- err
	}()
	for range 2 {
		select {
		case err := <-got:
			require.NoError(t, err)
		case err := <-wrote:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("frames did not arrive")
		}
	}
	assert.True(t, b.rdOn.Load(), "the second frame came through the ring")
}

// offeringSide is an active side's transport on c and its shared-memory
// offer, answered (the REP came): what newSwitchActive takes.
func offeringSide(t *testing.T, c *net.TCPConn) (*tcpTransport, *shmOffer) {
	t.Helper()
	o := newShmOffer(c, time.Now().Add(time.Minute))
	require.NotNil(t, o)
	tr, err := newTCPTransport(c)
	require.NoError(t, err)
	o.done = true
	return tr, o
}

// Closing a connection whose offer is still unanswered withdraws the
// offer at once (nobody can reach its socket any more) and frees its ring.
func TestSwitchTransportCloseWithdrawsOffer(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	before := ringsOpen(t)
	active, _ := tcpPair(t)
	tr, o := offeringSide(t, active)
	s := newSwitchActive(tr, o, switchRule{}) // invites at once: the offer listens
	name := shmSocketName(active.LocalAddr().(*net.TCPAddr), active.RemoteAddr().(*net.TCPAddr))
	c, err := net.Dial("unixpacket", name)
	require.NoError(t, err, "the offer is not listening")
	c.Close()
	require.NoError(t, s.close())
	_, err = net.Dial("unixpacket", name)
	require.Error(t, err, "the offer outlived its connection")
	require.True(t, eventually(func() bool { return ringsOpen(t) == before }), "the offer's ring was not freed")
}

// The active side opens its offer and invites the peer only once the
// connection has carried the threshold's bytes: before, nothing listens.
func TestSwitchTransportInvitesAfterTraffic(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	active, passive := tcpPair(t)
	tr, o := offeringSide(t, active)
	s := newSwitchActive(tr, o, switchRule{bytes: 4096})
	defer s.close()
	name := shmSocketName(active.LocalAddr().(*net.TCPAddr), active.RemoteAddr().(*net.TCPAddr))
	listening := func() bool {
		c, err := net.Dial("unixpacket", name)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	go func() { _, _ = io.Copy(io.Discard, passive) }()
	var h [hdrLen]byte
	(&header{typ: frameSend, len: 1000}).encode(&h)
	p := make([]byte, 1000)
	for i := 0; i < 3; i++ {
		_, err := s.writev([][]byte{h[:], p}, nil, true)
		require.NoError(t, err)
	}
	assert.False(t, listening(), "listening after %d bytes", s.moved.Load())
	_, err := s.writev([][]byte{h[:], p}, nil, true)
	require.NoError(t, err)
	assert.True(t, listening(), "not listening after %d bytes", s.moved.Load())
	s.wmu.Lock()
	invited := s.invited
	s.wmu.Unlock()
	assert.True(t, invited, "no invitation sent")
}

// The rule: bytes or frames, whichever first; no frame rule at 0; bytes 0
// moves at once.
func TestSwitchRule(t *testing.T) {
	settled := switchRule{bytes: 64 << 10, frames: 8, settleFrames: 2, settleAge: 100 * time.Millisecond}
	for _, c := range []struct {
		rule          switchRule
		bytes, frames int64
		age           time.Duration
		due           bool
	}{
		{switchRule{bytes: 64 << 10, frames: 16}, 0, 0, time.Hour, false},
		{switchRule{bytes: 64 << 10, frames: 16}, 64<<10 - 1, 15, time.Hour, false},
		{switchRule{bytes: 64 << 10, frames: 16}, 64 << 10, 0, 0, true},
		{switchRule{bytes: 64 << 10, frames: 16}, 100, 16, 0, true},
		{switchRule{bytes: 64 << 10}, 100, 1 << 20, time.Hour, false},
		{switchRule{bytes: 0, frames: 16}, 0, 0, 0, true},
		// A settled connection moves at its second frame, a young one not.
		{settled, 100, 1, time.Hour, false},
		{settled, 100, 2, 99 * time.Millisecond, false},
		{settled, 100, 2, 100 * time.Millisecond, true},
		{settled, 100, 7, time.Millisecond, false},
		{settled, 100, 8, 0, true},
		// With the frame rule off, the byte count alone decides.
		{switchRule{bytes: 64 << 10, settleFrames: 2, settleAge: time.Millisecond}, 100, 5, time.Hour, false},
	} {
		age := func() time.Duration { return c.age }
		assert.Equal(t, c.due, c.rule.due(c.bytes, c.frames, age), "%+v after %d bytes, %d frames, %v", c.rule, c.bytes, c.frames, c.age)
	}
	assert.True(t, switchRule{}.immediate())
	assert.False(t, switchRule{bytes: 1, frames: 1}.immediate())
}

// The active side opens its offer and invites the peer once it has
// received the rule's frames, however few bytes they carried.
func TestSwitchTransportInvitesAfterFrames(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	active, passive := tcpPair(t)
	tr, o := offeringSide(t, active)
	s := newSwitchActive(tr, o, switchRule{bytes: 1 << 40, frames: 4})
	defer s.close()
	name := shmSocketName(active.LocalAddr().(*net.TCPAddr), active.RemoteAddr().(*net.TCPAddr))
	listening := func() bool {
		c, err := net.Dial("unixpacket", name)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	go func() { _, _ = io.Copy(io.Discard, passive) }()
	var h [hdrLen]byte
	(&header{typ: frameSend, len: 8}).encode(&h)
	frame := append(h[:], make([]byte, 8)...)
	read := func() {
		t.Helper()
		_, err := passive.Write(frame)
		require.NoError(t, err)
		var got [hdrLen]byte
		require.NoError(t, s.readHeader(&got))
		require.NoError(t, s.discard(8))
	}
	for i := 0; i < 3; i++ {
		read()
	}
	assert.False(t, listening(), "listening after %d frames", s.frames.Load())
	read()
	assert.True(t, listening(), "not listening after %d frames", s.frames.Load())
}

// End to end through the CM: a connection that exchanges a few small
// messages, far below the byte threshold, moves to shared memory on both
// ends; with the frame rule off it stays on TCP.
func TestSwitchAfterFewMessages(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	defer SetSharedMemory(SetSharedMemory(true))
	defer SetSharedMemorySwitch(SetSharedMemorySwitch(64 << 10))
	for _, c := range []struct {
		frames int
		want   string
	}{{8, "shm"}, {0, "tcp"}} {
		t.Run(fmt.Sprint("frames", c.frames), func(t *testing.T) {
			defer SetSharedMemorySwitchFrames(SetSharedMemorySwitchFrames(c.frames))
			lch, lid := setupListener(t, net.IPv4(127, 0, 0, 76))
			ch, id := routedClient(t, lid)
			aq, acq := qpOn(t, id)
			require.NoError(t, id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
			req := getEvent(t, lch, verbs.EventConnectRequest)
			pq, pcq := acceptOn(t, req.ID) // a receive posted
			getEvent(t, ch, verbs.EventEstablished)
			getEvent(t, lch, verbs.EventEstablished)
			wait := func(cq verbs.CQ, want verbs.WCOpcode) {
				t.Helper()
				wc := make([]verbs.WC, 4)
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					n, err := cq.Poll(wc)
					require.NoError(t, err)
					for _, w := range wc[:n] {
						require.Equal(t, verbs.WCSuccess, w.Status)
						if w.Opcode == want {
							return
						}
					}
					time.Sleep(50 * time.Microsecond)
				}
				t.Fatal("no completion")
			}
			send := []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendSignaled}}
			for i := 0; i < 12; i++ { // 12 zero-byte round trips
				require.NoError(t, aq.PostRecv([]verbs.RecvWR{{WRID: 8}}))
				require.NoError(t, aq.PostSend(send))
				wait(pcq, verbs.WCRecv)
				require.NoError(t, pq.PostRecv([]verbs.RecvWR{{WRID: 7}}))
				require.NoError(t, pq.PostSend(send))
				wait(acq, verbs.WCRecv)
			}
			on := func() bool { return Carrier(aq) == c.want && Carrier(pq) == c.want }
			if c.want == "shm" {
				require.True(t, eventually(on), "carriers %s and %s, want shm", Carrier(aq), Carrier(pq))
			} else {
				time.Sleep(100 * time.Millisecond)
				require.True(t, on(), "carriers %s and %s, want tcp", Carrier(aq), Carrier(pq))
			}
		})
	}
}

// switchConn is one connection of BenchmarkShmSwitch: both ends' QPs and
// CQs through the CM, torn down by close.
type switchConn struct {
	aq, pq   verbs.QP
	acq, pcq verbs.CQ
	close    func()
}

func dialSwitchConn(tb testing.TB, lch *eventChannel, lid *cmID) *switchConn {
	ch := newEventChannel()
	id := newCMID(ch)
	ev := func(c *eventChannel, want verbs.CMEventType) verbs.CMEvent {
		for {
			e, err := c.GetEvent(time.Now().Add(10 * time.Second))
			require.NoError(tb, err)
			if e.Type == verbs.EventDisconnected && want != e.Type {
				continue // the listener's: an earlier connection's end
			}
			require.Equal(tb, want, e.Type)
			return e
		}
	}
	require.NoError(tb, id.ResolveAddr(nil, lid.LocalAddr(), 5*time.Second))
	ev(ch, verbs.EventAddrResolved)
	require.NoError(tb, id.ResolveRoute(5*time.Second))
	ev(ch, verbs.EventRouteResolved)
	qpFor := func(id verbs.CMID) (verbs.QP, verbs.CQ, func()) {
		pd, err := id.Context().AllocPD()
		require.NoError(tb, err)
		cq, err := id.Context().CreateCQ(8, nil)
		require.NoError(tb, err)
		qp, err := id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(tb, err)
		return qp, cq, func() { qp.Destroy(); cq.Destroy(); pd.Dealloc(); id.Destroy() }
	}
	c := &switchConn{}
	var aclose, pclose func()
	c.aq, c.acq, aclose = qpFor(id)
	require.NoError(tb, id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	req := ev(lch, verbs.EventConnectRequest)
	c.pq, c.pcq, pclose = qpFor(req.ID)
	require.NoError(tb, req.ID.Accept(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
	ev(ch, verbs.EventEstablished)
	ev(lch, verbs.EventEstablished)
	c.close = func() { aclose(); pclose(); ch.Close() }
	return c
}

// roundTrips makes n zero-byte SEND round trips on c.
func (c *switchConn) roundTrips(tb testing.TB, n int) {
	wait := func(cq verbs.CQ) {
		wc := make([]verbs.WC, 4)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			k, err := cq.Poll(wc)
			require.NoError(tb, err)
			for _, w := range wc[:k] {
				require.Equal(tb, verbs.WCSuccess, w.Status)
				if w.Opcode == verbs.WCRecv {
					return
				}
			}
			time.Sleep(10 * time.Microsecond) // not a spin: the ends need the CPUs
		}
		tb.Fatal("no completion")
	}
	send := []verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendSignaled}}
	for i := 0; i < n; i++ {
		require.NoError(tb, c.pq.PostRecv([]verbs.RecvWR{{WRID: 7}}))
		require.NoError(tb, c.aq.PostRecv([]verbs.RecvWR{{WRID: 8}}))
		require.NoError(tb, c.aq.PostSend(send))
		wait(c.pcq)
		require.NoError(tb, c.pq.PostSend(send))
		wait(c.acq)
	}
}

// BenchmarkShmSwitch: what moving a quiet connection to shared memory
// costs. Each op sets a connection up, makes 12 zero-byte round trips and
// tears it down; "switch" moves it to shared memory after 8 frames (and
// waits until both ends are there), "tcp" leaves it on TCP (the byte rule
// alone, 64 KiB). The difference is the exchange's cost: cpu-us/op is the
// process's CPU time (both ends) per connection.
func BenchmarkShmSwitch(b *testing.B) {
	if bootID() == "" {
		b.Skip("no boot ID: shared memory is never offered")
	}
	defer SetSharedMemory(SetSharedMemory(true))
	defer SetSharedMemorySwitch(SetSharedMemorySwitch(64 << 10))
	for _, c := range []struct {
		name   string
		frames int
		want   string
	}{{"tcp", 0, "tcp"}, {"switch", 8, "shm"}} {
		b.Run(c.name, func(b *testing.B) {
			defer SetSharedMemorySwitchFrames(SetSharedMemorySwitchFrames(c.frames))
			lch := newEventChannel()
			lid := newCMID(lch)
			require.NoError(b, lid.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 77)}))
			require.NoError(b, lid.Listen(64))
			defer func() { lid.Destroy(); lch.Close() }()
			cpu0 := verbstest.ProcessCPU(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sc := dialSwitchConn(b, lch, lid)
				sc.roundTrips(b, 12)
				for deadline := time.Now().Add(10 * time.Second); Carrier(sc.aq) != c.want || Carrier(sc.pq) != c.want; {
					if time.Now().After(deadline) {
						b.Fatalf("carriers %s and %s, want %s", Carrier(sc.aq), Carrier(sc.pq), c.want)
					}
					time.Sleep(10 * time.Microsecond)
				}
				sc.close()
			}
			b.StopTimer()
			cpu := verbstest.ProcessCPU(b) - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// A connection that talks seldom moves once it has settled: a few quick
// round trips in its first moments leave it on TCP (a short-lived
// connection never pays for the rings), one more after shmSettleAge moves
// it.
func TestSwitchSettledConnection(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	defer SetSharedMemory(SetSharedMemory(true))
	defer SetSharedMemorySwitch(SetSharedMemorySwitch(64 << 10))
	defer SetSharedMemorySwitchFrames(SetSharedMemorySwitchFrames(8))
	lch := newEventChannel()
	lid := newCMID(lch)
	require.NoError(t, lid.BindAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 78)}))
	require.NoError(t, lid.Listen(8))
	defer func() { lid.Destroy(); lch.Close() }()
	sc := dialSwitchConn(t, lch, lid)
	defer sc.close()
	start := time.Now()
	sc.roundTrips(t, 2)
	if time.Since(start) < shmSettleAge/2 { // else the host was too slow to tell
		time.Sleep(20 * time.Millisecond)
		assert.Equal(t, "tcp", Carrier(sc.aq), "a young connection after 2 round trips")
	}
	time.Sleep(shmSettleAge)
	sc.roundTrips(t, 1)
	on := func() bool { return Carrier(sc.aq) == "shm" && Carrier(sc.pq) == "shm" }
	require.True(t, eventually(on), "carriers %s and %s after a round trip at %v, want shm", Carrier(sc.aq), Carrier(sc.pq), time.Since(start))
}

// A switching connection's active side, still on TCP, says it holds no
// payload while its rule still counts what it reads (readPayload's count
// may start the switch: no work for under the QP's lock), and holds it
// once the switch has started; a side that counts nothing (the passive
// side's offer is nil) asks its TCP transport.
func TestSwitchTransportHoldsOnlyOnceCountingEnds(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot ID: shared memory is never offered")
	}
	active, passive := tcpPair(t)
	tr, o := offeringSide(t, active)
	s := newSwitchActive(tr, o, switchRule{bytes: 1 << 20})
	defer s.close()
	go func() { _, _ = io.Copy(io.Discard, passive) }() // the invitation
	sendFrame(t, passive, 64)
	var h [hdrLen]byte
	require.NoError(t, s.readHeader(&h))
	readAhead(t, s.tcp, 64)
	assert.False(t, s.holds(64), "the rule still counts what is read")
	s.start()
	assert.True(t, s.holds(64), "the switch has started: nothing left to count")
	assert.False(t, s.holds(65))

	a, b := tcpPair(t)
	btr, err := newTCPTransport(b)
	require.NoError(t, err)
	ps := &switchTransport{tcp: btr}
	sendFrame(t, a, 64)
	require.NoError(t, ps.readHeader(&h))
	readAhead(t, btr, 64)
	assert.True(t, ps.holds(64), "no rule to count for")
}

// sendFrame writes a SEND frame with an n-byte payload on c in one write.
func sendFrame(t *testing.T, c net.Conn, n int) {
	t.Helper()
	var h [hdrLen]byte
	(&header{typ: frameSend, len: uint32(n)}).encode(&h)
	_, err := c.Write(append(h[:], make([]byte, n)...))
	require.NoError(t, err)
}
