//go:build linux

package soft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmanet/rdma/verbs"
)

// shmPair builds two connected shared-memory transports the way the CM
// does (rings and eventfds exchanged over a unix socket), without the CM.
func shmPair(t testing.TB) (a, b *shmTransport) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		acc <- c
	}()
	ta, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	tb := <-acc
	require.NotNil(t, tb)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	unixConn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "unix")
		c, err := net.FileConn(f)
		f.Close()
		require.NoError(t, err)
		return c.(*net.UnixConn)
	}
	ua, ub := unixConn(fds[0]), unixConn(fds[1])

	defer ua.Close()
	defer ub.Close()

	la, err := newShmLocal(defaultShmRing)
	require.NoError(t, err)
	lb, err := newShmLocal(defaultShmRing)
	require.NoError(t, err)
	require.NoError(t, sendSetup(ua, la))
	pb, err := recvSetup(ub, defaultShmRing)
	require.NoError(t, err)
	require.NoError(t, sendSetup(ub, lb))
	pa, err := recvSetup(ua, defaultShmRing)
	require.NoError(t, err)
	a, err = newShmTransport(ta, la, pa)
	require.NoError(t, err)
	b, err = newShmTransport(tb, lb, pb)
	require.NoError(t, err)
	t.Cleanup(func() { a.close(); b.close() })
	return a, b
}

// frame writes a header-like 32-byte block and a payload, as the engine does.
func writeFrame(tr transport, hdr *[hdrLen]byte, payload []byte, v [][]byte) error {
	v = append(v[:0], hdr[:], payload)
	_, err := tr.writev(v, nil, true)
	return err
}

// A stream of frames of random sizes, some payloads in registered memory,
// some on the Go heap (all copied through the ring), wrapping the ring many
// times, arrives intact and in order.
func TestShmTransportStream(t *testing.T) {
	a, b := shmPair(t)
	mem, err := verbs.AllocMemory(4 << 20)
	require.NoError(t, err)
	defer mem.Free()
	reg := mem.Bytes()
	heap := make([]byte, 1<<20)
	rng := rand.New(rand.NewSource(1))
	rng.Read(reg)
	rng.Read(heap)

	type rec struct {
		src []byte
	}
	const n = 3000
	sizes := make([]rec, n)
	for i := range sizes {
		sz := rng.Intn(70000)
		if i%7 == 0 {
			sz = rng.Intn(200)
		}
		if i%2 == 0 {
			off := rng.Intn(len(reg) - sz)
			sizes[i].src = reg[off : off+sz]
		} else {
			off := rng.Intn(len(heap) - sz)
			sizes[i].src = heap[off : off+sz]
		}
	}
	errc := make(chan error, 1)
	go func() {
		var hdr [hdrLen]byte
		var v [][]byte
		for i, r := range sizes {
			hdr[0] = byte(i)
			if err := writeFrame(a, &hdr, r.src, v); err != nil {
				errc <- err
				return
			}
		}
		errc <- a.closeWrite()
	}()
	var h [hdrLen]byte
	got := make([]byte, 70000)
	for i, r := range sizes {
		require.NoError(t, b.readHeader(&h), "frame %d", i)
		require.Equal(t, byte(i), h[0])
		dst := got[:len(r.src)]
		// Read in two pieces, as the engine does with scatter lists.
		k := len(dst) / 3
		require.NoError(t, b.readPayload(dst[:k], gateRef{}))
		require.NoError(t, b.readPayload(dst[k:], gateRef{}))
		require.True(t, bytes.Equal(r.src, dst), "frame %d payload differs", i)
	}
	require.NoError(t, <-errc)
	assert.Equal(t, io.EOF, b.readHeader(&h))
}

// The data path allocates nothing: a small frame and a large one from
// registered memory, written and read.
func TestShmTransportAllocs(t *testing.T) {
	a, b := shmPair(t)
	mem, err := verbs.AllocMemory(64 << 10)
	require.NoError(t, err)
	defer mem.Free()
	small := make([]byte, 64)
	big := mem.Bytes()
	dst := make([]byte, len(big))
	var hdr, h [hdrLen]byte
	v := make([][]byte, 0, 4)
	run := func() {
		v = append(v[:0], hdr[:], small)
		if _, err := a.writev(v, nil, true); err != nil {
			t.Fatal(err)
		}
		v = append(v[:0], hdr[:], big)
		if _, err := a.writev(v, nil, true); err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{dst[:64], dst} {
			if err := b.readHeader(&h); err != nil {
				t.Fatal(err)
			}
			if err := b.readPayload(p, gateRef{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run()
	assert.Zero(t, testing.AllocsPerRun(200, run))
	assert.Equal(t, big, dst)
}

// What a peer writes into the ring is checked: garbage fails the read with
// a protocol error, and nothing panics.
func TestShmTransportGarbage(t *testing.T) {
	cases := map[string]func(r *shmRing){
		"unknown record": func(r *shmRing) {
			r.data[0] = 99
			r.tail.Store(8)
		},
		"tail beyond the ring": func(r *shmRing) { r.tail.Store(uint64(len(r.data)) + 8) },
		"unaligned tail":       func(r *shmRing) { r.tail.Store(3) },
		"data longer than published": func(r *shmRing) {
			r.data[0] = recData
			r.data[4] = 100
			r.tail.Store(16)
		},
		"pad not to the end": func(r *shmRing) {
			r.data[0] = recPad
			r.tail.Store(8)
		},
		"reference to the sender's memory (no longer a record)": func(r *shmRing) {
			r.data[0] = 2
			r.data[4] = 100
			r.tail.Store(24)
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			a, b := shmPair(t)
			f(&a.tx)
			var h [hdrLen]byte
			assert.ErrorIs(t, b.readHeader(&h), errProtocol)
		})
	}
}

// The peer's death (its end of the handshake's TCP connection closing) ends
// a blocked read at once; close unblocks a reader too.
func TestShmTransportPeerGoneAndClose(t *testing.T) {
	a, b := shmPair(t)
	errc := make(chan error, 1)
	go func() {
		var h [hdrLen]byte
		errc <- b.readHeader(&h)
	}()
	time.Sleep(20 * time.Millisecond)
	a.tcp.Close() // as the kernel does for a killed process
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	case <-time.After(5 * time.Second):
		t.Fatal("reader not woken by the peer's death")
	}

	c, d := shmPair(t)
	_ = c
	go func() {
		var h [hdrLen]byte
		errc <- d.readHeader(&h)
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, d.close())
	select {
	case err := <-errc:
		assert.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("reader not woken by close")
	}
}

// A writer blocked on a full ring wakes when the reader frees space.
func TestShmTransportFullRing(t *testing.T) {
	a, b := shmPair(t)
	payload := make([]byte, 3*defaultShmRing) // Go heap: copied through the ring
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	n, err := a.writev([][]byte{payload}, nil, false)
	require.NoError(t, err)
	assert.Less(t, n, len(payload), "a non-blocking write takes only what fits")
	errc := make(chan error, 1)
	go func() {
		_, err := a.writev([][]byte{payload[n:]}, nil, true)
		errc <- err
	}()
	got := make([]byte, len(payload))
	require.NoError(t, b.readPayload(got, gateRef{}))
	require.NoError(t, <-errc)
	assert.Equal(t, payload, got)
}

// The reader's wait for data and the writer's for space share one eventfd:
// with both asleep on it at once, in either order, each is woken by what
// it waits for, and a read deadline ends the reader's wait only.
func TestShmTransportReaderAndWriterAsleep(t *testing.T) {
	for _, readerFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("readerFirst=%v", readerFirst), func(t *testing.T) {
			a, b := shmPair(t)
			payload := make([]byte, 2*defaultShmRing)
			for i := range payload {
				payload[i] = byte(i * 13)
			}
			var h [hdrLen]byte
			readc := make(chan error, 1)
			writec := make(chan error, 1)
			startReader := func() {
				go func() { readc <- a.readHeader(&h) }()
			}
			startWriter := func() {
				go func() {
					_, err := a.writev([][]byte{payload}, nil, true)
					writec <- err
				}()
			}
			if readerFirst {
				startReader()
				time.Sleep(20 * time.Millisecond) // asleep (a hang check below, not a speed one)
				startWriter()
			} else {
				startWriter()
				time.Sleep(20 * time.Millisecond)
				startReader()
			}
			time.Sleep(20 * time.Millisecond)
			select {
			case err := <-readc:
				t.Fatalf("read returned with nothing sent: %v", err)
			case err := <-writec:
				t.Fatalf("write of twice the ring returned with nothing read: %v", err)
			default:
			}
			// The peer drains a's ring: the writer, not the reader, ends.
			got := make([]byte, len(payload))
			drained := make(chan error, 1)
			go func() { drained <- b.readPayload(got, gateRef{}) }()
			select {
			case err := <-writec:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				a.close() // unblocks the peer's read too
				t.Fatal("the writer was not woken by the space freed")
			}
			require.NoError(t, <-drained)
			assert.Equal(t, payload, got)
			select {
			case err := <-readc:
				t.Fatalf("read returned with nothing sent: %v", err)
			default:
			}
			// The peer sends a frame: the reader ends with it.
			hdr := [hdrLen]byte{1, 2, 3}
			require.NoError(t, writeFrame(b, &hdr, nil, nil))
			select {
			case err := <-readc:
				require.NoError(t, err)
				assert.Equal(t, hdr, h)
			case <-time.After(10 * time.Second):
				t.Fatal("the reader was not woken by the data")
			}

			// A deadline set while both sleep ends the read, not the write.
			startReader()
			startWriter()
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, a.setReadDeadline(time.Now().Add(20*time.Millisecond)))
			select {
			case err := <-readc:
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			case <-time.After(10 * time.Second):
				t.Fatal("the read deadline did not end the read")
			}
			select {
			case err := <-writec:
				t.Fatalf("the read deadline ended the write: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			require.NoError(t, a.setReadDeadline(time.Time{}))
			require.NoError(t, b.readPayload(got, gateRef{}))
			require.NoError(t, <-writec)
			assert.Equal(t, payload, got)
		})
	}
}

// FuzzShmRing: whatever a peer writes into our ring (records and the
// published tail), reading it ends in data or an error, never a panic or an
// access outside the ring or a mapping.
func FuzzShmRing(f *testing.F) {
	rec := func(kind, n uint32, body ...byte) []byte {
		b := make([]byte, 8, 8+len(body))
		b[0], b[1], b[2], b[3] = byte(kind), byte(kind>>8), byte(kind>>16), byte(kind>>24)
		b[4], b[5], b[6], b[7] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
		return append(b, body...)
	}
	f.Add(append(rec(recData, 32), make([]byte, 32)...), uint64(40))
	f.Add(rec(2, 100, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), uint64(24))
	f.Add(rec(recPad, 1<<20-8), uint64(1<<20))
	f.Add([]byte{}, uint64(1<<63))
	_, b := shmPair(f)
	dst := make([]byte, 64<<10)
	f.Fuzz(func(t *testing.T, ring []byte, tail uint64) {
		b.rhead, b.recSrc, b.recKind, b.hn = 0, nil, 0, 0
		b.rx.head.Store(0)
		clear(b.rx.data[:min(len(b.rx.data), 4096)])
		copy(b.rx.data, ring)
		b.rx.tail.Store(tail)
		b.rx.wclosed.Store(1) // nothing more comes: reads end instead of waiting
		var h [hdrLen]byte
		for i := 0; i < 1000; i++ {
			if err := b.readHeader(&h); err != nil {
				return
			}
			if err := b.readPayload(dst[:int(h[0])*256], gateRef{}); err != nil {
				return
			}
		}
	})
}

// A write that takes only part of the buffers leaves the caller's vector
// as it was (the engine trims it by the count returned), and the rest,
// written afterwards, completes the stream exactly.
func TestShmTransportPartialWriteLeavesVector(t *testing.T) {
	a, b := shmPair(t)
	hdr := make([]byte, hdrLen)
	payload := make([]byte, 2*defaultShmRing)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	v := [][]byte{hdr, payload}
	n, err := a.writev(v, nil, false)
	require.NoError(t, err)
	require.Less(t, n, len(hdr)+len(payload))
	require.Len(t, v[1], len(payload), "writev changed the caller's vector")
	errc := make(chan error, 1)
	go func() {
		_, err := a.writev(trimVec(v, n), nil, true)
		errc <- err
	}()
	got := make([]byte, len(hdr)+len(payload))
	require.NoError(t, b.readPayload(got, gateRef{}))
	require.NoError(t, <-errc)
	assert.Equal(t, payload, got[hdrLen:])
}

// tcpPair returns the two ends of a loopback TCP connection: the dialler's
// (the active side) and the acceptor's (the passive side).
func tcpPair(t *testing.T) (active, passive *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 2, 1)})
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		acc <- c
	}()
	active, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	passive = <-acc
	require.NotNil(t, passive)
	t.Cleanup(func() { active.Close(); passive.Close() })
	return active, passive
}

// fakeOffer plays a hostile active side of a shared-memory offer of the
// given version on the connection's active end: it listens where the
// passive side dials and hands it, after the token (and in version 3 the
// passive side's setup, dropped), to serve. It returns the REQ to answer.
func fakeOffer(t *testing.T, active *net.TCPConn, version uint8, serve func(uc *net.UnixConn)) *hsMsg {
	t.Helper()
	name := shmSocketName(active.LocalAddr().(*net.TCPAddr), active.RemoteAddr().(*net.TCPAddr))
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); close(stop); <-done })
	go func() {
		defer close(done)
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		if version == 2 {
			var tok [16]byte
			if _, err := uc.Read(tok[:]); err != nil {
				return
			}
		} else {
			var b [16 + shmSetupLen]byte
			fds, err := recvFDs(uc, b[:], 2)
			if err != nil {
				return
			}
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
		serve(uc)
		<-stop
	}()
	return &hsMsg{typ: msgREQ, transports: transportTCP | transportShm,
		ext: (&shmOfferExt{version: version, bootID: bootID(), ringSize: defaultShmRing}).marshal()}
}

// hostileRing sends a ring setup of the given advertised size, over a
// memfd of fileSize bytes named hostile-ring with the given mode, sealed
// against shrinking when sealed is true.
func hostileRing(t *testing.T, uc *net.UnixConn, size uint32, fileSize int64, mode uint32, sealed bool) {
	fd, err := unix.MemfdCreate("hostile-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Fchmod(fd, mode))
	require.NoError(t, unix.Ftruncate(fd, fileSize))
	if sealed {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
		require.NoError(t, err)
	}
	var magic [8]byte
	binary.LittleEndian.PutUint64(magic[:], shmMagic)
	_, err = unix.Pwrite(fd, magic[:], 0)
	require.NoError(t, err)
	e1, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(e1)
	var b [shmSetupLen]byte
	marshalShmSetup(&b, size)
	_, _, err = uc.WriteMsgUnix(b[:], unix.UnixRights(fd, e1), nil)
	require.NoError(t, err)
}

// mapped reports whether a memfd of that name is mapped in this process.
func mapped(t *testing.T, name string) bool {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return bytes.Contains(b, []byte("/memfd:"+name+" "))
}

// Nothing the active side sends sizes the passive side's mappings beyond
// its own ring size, and no step of the exchange waits on it without a
// deadline: each hostile offer below ends in TCP (shmAnswer nil) within
// the setup timeout, with nothing of the peer's left mapped.
func TestShmAnswerBoundsThePeer(t *testing.T) {
	const big = 256 << 20
	cases := map[string]func(t *testing.T, uc *net.UnixConn){
		"ring larger than ours": func(t *testing.T, uc *net.UnixConn) {
			hostileRing(t, uc, big, shmHdrPage+big, 0o600, true)
		},
		"ring file smaller than announced": func(t *testing.T, uc *net.UnixConn) {
			hostileRing(t, uc, defaultShmRing, shmHdrPage, 0o600, true)
		},
		"ring that may shrink": func(t *testing.T, uc *net.UnixConn) {
			hostileRing(t, uc, defaultShmRing, shmHdrPage+defaultShmRing, 0o600, false)
		},
		"ring other users may open": func(t *testing.T, uc *net.UnixConn) {
			hostileRing(t, uc, defaultShmRing, shmHdrPage+defaultShmRing, 0o666, true)
		},
		"silent after the token": func(t *testing.T, uc *net.UnixConn) {},
		"gone after the token":   func(t *testing.T, uc *net.UnixConn) { uc.Close() },
	}
	for _, version := range []uint8{2, 3} {
		for name, serve := range cases {
			t.Run(fmt.Sprintf("v%d/%s", version, name), func(t *testing.T) {
				active, passive := tcpPair(t)
				req := fakeOffer(t, active, version, func(uc *net.UnixConn) { serve(t, uc) })
				start := time.Now()
				_, err := answerAndStart(req, passive)
				assert.Error(t, err, "shared memory set up with a hostile peer")
				assert.Less(t, time.Since(start), shmSetupTimeout+time.Second)
				assert.False(t, mapped(t, "hostile-ring"), "the peer's ring stayed mapped")
			})
		}
		// The same exchange with an honest ring succeeds (so the above
		// failed for the reasons they name).
		active, passive := tcpPair(t)
		req := fakeOffer(t, active, version, func(uc *net.UnixConn) {
			hostileRing(t, uc, defaultShmRing, shmHdrPage+defaultShmRing, 0o600, true)
		})
		st, err := answerAndStart(req, passive)
		require.NoError(t, err, "version %d", version)
		assert.True(t, mapped(t, "hostile-ring"))
		st.close()
		assert.False(t, mapped(t, "hostile-ring"))
	}
}

// answerAndStart answers req's offer on passive and, when the answer takes
// it, starts the transport as Accept does once the REP is sent (version 3
// receives the active side's setup only then).
func answerAndStart(req *hsMsg, passive *net.TCPConn) (transport, error) {
	p := shmAnswer(req, passive, time.Now().Add(time.Minute))
	if p == nil {
		return nil, errShmSetup
	}
	return p.start(passive)
}

// The active side pairs only with a process of its own uid that presents
// the REQ's token: others that reach its socket first are skipped, and the
// real passive side still gets through.
func TestShmOfferSkipsStrangers(t *testing.T) {
	active, passive := tcpPair(t)
	o := newShmOfferVersion(active, time.Now().Add(5*time.Second), 3)
	require.NotNil(t, o)
	defer o.abort()
	name := shmSocketName(active.LocalAddr().(*net.TCPAddr), active.RemoteAddr().(*net.TCPAddr))

	// Another uid (we play one by changing whom we accept).
	me := shmUID.Swap(12345)
	c, err := net.Dial("unixpacket", name)
	require.NoError(t, err)
	defer c.Close()
	closedOrSilent := func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 64))
		assert.Error(t, err, "a stranger was sent a ring")
	}
	closedOrSilent(c)
	shmUID.Store(me)

	// Our uid, wrong token.
	w, err := net.Dial("unixpacket", name)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Write(make([]byte, 16))
	require.NoError(t, err)
	closedOrSilent(w)

	// Our uid, wrong token with a well-formed ring: the ring is not taken.
	w2, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	require.NoError(t, err)
	defer w2.Close()
	l, err := newShmLocal(shmRingMin)
	require.NoError(t, err)
	defer l.free()
	require.NoError(t, sendTokenSetup(w2, &[16]byte{1}, l))
	closedOrSilent(w2)

	req := hsMsg{typ: msgREQ, transports: transportTCP | transportShm, ext: o.extension()}
	p := shmAnswer(&req, passive, time.Now().Add(5*time.Second))
	require.NotNil(t, p, "the real passive side was refused")
	defer p.abort()
	tr, err := o.finish(active)
	require.NoError(t, err)
	tr.close()
}

// The passive side answers only a listener of its own uid.
func TestShmAnswerOnlyToSameUser(t *testing.T) {
	active, passive := tcpPair(t)
	o := newShmOfferVersion(active, time.Now().Add(5*time.Second), 3)
	require.NotNil(t, o)
	defer o.abort()
	defer shmUID.Store(shmUID.Swap(12345)) // we play another user
	req := hsMsg{typ: msgREQ, transports: transportTCP | transportShm, ext: o.extension()}
	assert.Nil(t, shmAnswer(&req, passive, time.Now().Add(5*time.Second)))
}

// A REQ's shared-memory offer is taken only when it is well-formed and from
// this boot of this host; otherwise the connection stays on TCP.
func TestShmAnswerRefusesBadOffers(t *testing.T) {
	active, passive := tcpPair(t)
	o := newShmOfferVersion(active, time.Now().Add(5*time.Second), 3)
	require.NotNil(t, o)
	good := o.extension()
	other := append([]byte(nil), good...)
	other[4] ^= 1 // another boot ID
	for name, m := range map[string]hsMsg{
		"not offered":        {transports: transportTCP, ext: good},
		"no extension":       {transports: transportTCP | transportShm},
		"other host or boot": {transports: transportTCP | transportShm, ext: other},
		"truncated":          {transports: transportTCP | transportShm, ext: good[:len(good)-1]},
		"longer":             {transports: transportTCP | transportShm, ext: append(append([]byte(nil), good...), 'x')},
	} {
		assert.Nil(t, shmAnswer(&m, passive, time.Now().Add(time.Second)), name)
	}
	o.abort()
	// A ring larger than we map: TCP, and nothing dialled for it (the
	// offer sees no one before its deadline).
	o = newShmOfferVersion(active, time.Now().Add(300*time.Millisecond), 3)
	require.NotNil(t, o)
	prevRing := SetSharedMemoryRing(shmRingMin)
	m := hsMsg{transports: transportTCP | transportShm, ext: o.extension()}
	assert.Nil(t, shmAnswer(&m, passive, time.Now().Add(time.Second)), "offered ring above our limit")
	SetSharedMemoryRing(prevRing)
	tr, err := o.finish(active)
	assert.Error(t, err, "the passive side dialled for an offer it refused")
	if err == nil {
		tr.close()
	}
	m = hsMsg{transports: transportTCP | transportShm, ext: good}
	assert.Nil(t, shmAnswer(&m, passive, time.Now().Add(time.Second)), "offer withdrawn: nobody listening")

	prev := SetSharedMemory(false)
	assert.Nil(t, newShmOffer(active, time.Now().Add(time.Second)), "shared memory turned off")
	SetSharedMemory(prev)
}

// A large write goes into the ring as records of at most shmRecordMax,
// each published as it closes, so that the consumer copies one out while
// the producer fills the next instead of waiting for the whole write.
func TestShmTransportLargeWriteInRecords(t *testing.T) {
	a, b := shmPair(t)
	payload := make([]byte, 1<<20+100)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	n, err := a.writev([][]byte{payload}, nil, false)
	require.NoError(t, err)
	require.Equal(t, len(payload), n)

	records, at := 0, b.rhead
	for at != b.rx.tail.Load() {
		w := binary.LittleEndian.Uint64(b.rx.data[at&b.rx.mask:])
		kind, size := uint32(w), w>>32
		require.Equal(t, uint32(recData), kind)
		require.LessOrEqual(t, size, uint64(shmRecordMax), "record %d", records)
		records++
		at += recHdr + (size+7)&^7
	}
	assert.GreaterOrEqual(t, records, len(payload)/shmRecordMax)

	got := make([]byte, len(payload))
	require.NoError(t, b.readPayload(got, gateRef{}))
	assert.Equal(t, payload, got)
}

// A reader whose last wait slept longer than shmIdleGap (an idle
// connection's) goes to sleep at once in its next wait instead of
// spinning; one that found its data within the spin keeps spinning.
func TestShmReaderSkipsSpinAfterIdle(t *testing.T) {
	useSpinLimit(t, &testSpinLimit{}) // spins allowed: what is tested is the idle rule
	a, b := shmPair(t)
	var hdr [hdrLen]byte
	read := func() chan error {
		done := make(chan error, 1)
		go func() {
			var h [hdrLen]byte
			done <- b.readHeader(&h)
		}()
		return done
	}
	// asleep reports whether the reader is asleep on its eventfd within d.
	asleep := func(d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if b.rx.rwait.Load() != 0 {
				return true
			}
		}
		return false
	}

	// Data within the spin: caught spinning, never asleep.
	done := read()
	time.Sleep(20 * time.Millisecond)
	assert.False(t, b.rx.rwait.Load() != 0, "spinning, not asleep")
	require.NoError(t, writeFrame(a, &hdr, nil, nil))
	require.NoError(t, <-done)
	assert.False(t, b.rIdle)

	// Data after the spin: the reader slept, longer than shmIdleGap.
	done = read()
	require.True(t, asleep(5*time.Second), "asleep once the spin is over")
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, writeFrame(a, &hdr, nil, nil))
	require.NoError(t, <-done)
	assert.True(t, b.rIdle)

	// The next wait sleeps at once, well within the one-second spin.
	done = read()
	assert.True(t, asleep(300*time.Millisecond), "no spin after an idle wait")
	require.NoError(t, writeFrame(a, &hdr, nil, nil))
	require.NoError(t, <-done)
}

// A batch that carries a READ response is written in smaller records (its
// requester copies each out as it lands); other writes keep the larger
// ones.
func TestShmTransportPipelinedRecords(t *testing.T) {
	for _, piped := range []bool{true, false} {
		a, b := shmPair(t)
		payload := make([]byte, 1<<20)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		a.pipeline(piped)
		n, err := a.writev([][]byte{payload}, nil, false)
		require.NoError(t, err)
		require.Equal(t, len(payload), n)

		largest, at := uint64(0), b.rhead
		for at != b.rx.tail.Load() {
			w := binary.LittleEndian.Uint64(b.rx.data[at&b.rx.mask:])
			size := w >> 32
			largest = max(largest, size)
			at += recHdr + (size+7)&^7
		}
		if piped {
			assert.LessOrEqual(t, largest, uint64(shmPipedRecordMax))
		} else {
			assert.Greater(t, largest, uint64(shmPipedRecordMax))
			assert.LessOrEqual(t, largest, uint64(shmRecordMax))
		}
		got := make([]byte, len(payload))
		require.NoError(t, b.readPayload(got, gateRef{}))
		assert.Equal(t, payload, got)
	}
}

// Small frames exchanged in turn, each read before the next is written,
// stay within the ring's first shmHotWindow bytes (plus one record): the
// writer starts again at the beginning once the reader has taken all it
// wrote, and the frames arrive intact across those jumps.
func TestShmTransportRewindsWhenDrained(t *testing.T) {
	a, b := shmPair(t)
	var hdr, h [hdrLen]byte
	var v [][]byte
	payload := make([]byte, 100)
	got := make([]byte, len(payload))
	most := uint64(0)
	for i := 0; i < 1000; i++ {
		hdr[0], payload[0] = byte(i), byte(i>>8)
		require.NoError(t, writeFrame(a, &hdr, payload, v))
		most = max(most, a.wpos&a.tx.mask)
		require.NoError(t, b.readHeader(&h))
		require.Equal(t, byte(i), h[0])
		require.NoError(t, b.readPayload(got, gateRef{}))
		require.Equal(t, byte(i>>8), got[0])
	}
	assert.Less(t, most, uint64(shmHotWindow+256), "the writer came back to the start")
	assert.Greater(t, a.wpos, uint64(len(a.tx.data)), "it went round the ring that way, not by filling it")

	// Frames the reader has not taken yet are never jumped over.
	for i := 0; i < 200; i++ {
		hdr[0] = byte(i)
		require.NoError(t, writeFrame(a, &hdr, payload, v))
	}
	for i := 0; i < 200; i++ {
		require.NoError(t, b.readHeader(&h))
		require.Equal(t, byte(i), h[0], "frame %d", i)
		require.NoError(t, b.readPayload(got, gateRef{}))
	}
}

// A reader whose last wait ended over shmIdleGap ago, with nothing come in
// or gone out since, sleeps at once instead of spinning (the wait of soft's
// background receiver on a quiet connection); one that sent since, whose
// answer may be near, spins as before, however long ago its last wait.
func TestShmReaderSkipsSpinWhenQuiet(t *testing.T) {
	useSpinLimit(t, &testSpinLimit{}) // spins allowed: what is tested is the quiet rule
	a, b := shmPair(t)
	var hdr [hdrLen]byte
	read := func() chan error { return readHeaderAsync(b) }

	// The first wait spins, and catches data sent within it.
	done := read()
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, b.rx.rwait.Load(), "spinning, not asleep")
	require.NoError(t, writeFrame(a, &hdr, nil, nil))
	require.NoError(t, <-done)
	require.False(t, b.rIdle)

	// Quiet since, but b sent: its wait spins.
	time.Sleep(5 * shmIdleGap)
	require.NoError(t, writeFrame(b, &hdr, nil, nil))
	done = read()
	assert.False(t, readerAsleep(b, 50*time.Millisecond), "spinning after a send")
	require.NoError(t, writeFrame(a, &hdr, nil, nil))
	require.NoError(t, <-done)
	require.False(t, b.rIdle)

	// Quiet since, nothing sent or received: the wait sleeps at once, well
	// within the one-second spin.
	entered := b.rSpin
	time.Sleep(5 * shmIdleGap)
	done = read()
	assert.True(t, readerAsleep(b, 300*time.Millisecond), "no spin after a quiet gap")
	require.NoError(t, writeFrame(a, &hdr, nil, nil))
	require.NoError(t, <-done)
	assert.Equal(t, entered, b.rSpin, "the skipped spin is no miss")
}

// On shared memory the payload is here once its header was read when the
// writer wrote the frame in one call (one record); a payload that goes on
// in the next record is not, nor is a byte more than the record holds.
func TestShmHoldsTheRecordsRest(t *testing.T) {
	a, b := shmPair(t)
	_, err := a.writev([][]byte{make([]byte, hdrLen), make([]byte, 64)}, nil, true)
	require.NoError(t, err)
	var h [hdrLen]byte
	require.NoError(t, b.readHeader(&h))
	checkHolds64(t, b)

	// The header in one record, its payload in the next.
	_, err = a.writev([][]byte{make([]byte, hdrLen)}, nil, true)
	require.NoError(t, err)
	_, err = a.writev([][]byte{make([]byte, 64)}, nil, true)
	require.NoError(t, err)
	require.NoError(t, b.readHeader(&h))
	assert.False(t, b.holds(1), "the payload is in the next record")
	assert.True(t, b.holds(0))
	require.NoError(t, b.readPayload(make([]byte, 64), gateRef{}))
}
