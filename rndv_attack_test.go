package rdma

import (
	"bytes"
	"errors"
	"github.com/rdmanet/rdma/internal/streamconn"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/internal/testsupport"
	"github.com/rdmanet/rdma/internal/zerocopy"
	"github.com/rdmanet/rdma/verbs"
)

// The rendezvous against a peer that speaks the verbs itself: an honest
// one first (the wire as specified, independently of this package's
// writer), then one that forges, stretches, replays or lets go stale what
// it announces, or stalls as a reader. The Conn under attack is the
// listener's; whatever the peer does, it gets its connection failed (a
// protocol error, or a remote access error from its own device's checks),
// never a panic, never bytes outside the Read's slice, and the listener
// serves on.

// expose registers data (copied into fresh memory) for remote READ.
func (r *rawPeer) expose(t *testing.T, data []byte, access verbs.Access) verbs.MR {
	t.Helper()
	mem, err := verbs.AllocMemory(len(data))
	require.NoError(t, err)
	t.Cleanup(func() { mem.Free() })
	buf := mem.Bytes()[:len(data)]
	copy(buf, data)
	mr, err := r.pd.RegMR(buf, access)
	require.NoError(t, err)
	t.Cleanup(func() { mr.Dereg() })
	return mr
}

// sendRndv announces m to the listener's conn: its descriptor into the
// conn's mailbox, immediate CtlRndv.
func (r *rawPeer) sendRndv(t *testing.T, m stream.RndvMsg) {
	t.Helper()
	var b [stream.RndvMsgLen]byte
	m.Marshal(b[:])
	r.sendRndvBytes(t, b[:])
}

func (r *rawPeer) sendRndvBytes(t *testing.T, b []byte) {
	t.Helper()
	r.write(t, 1<<r.peer.ringLog+stream.RndvMsgAt, b, immCtl(stream.CtlRndv))
}

// awaitImm polls the raw peer's CQ until a message with immediate imm
// arrives (true) or d passes.
func (r *rawPeer) awaitImm(t *testing.T, imm uint32, d time.Duration) bool {
	t.Helper()
	wcs := make([]verbs.WC, 16)
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		n, err := r.cq.Poll(wcs)
		require.NoError(t, err)
		for _, wc := range wcs[:n] {
			if wc.Opcode == verbs.WCRecvRDMAWithImm && wc.Imm == imm {
				return true
			}
		}
	}
	return false
}

// readFailure reads s until an error, which must not be io.EOF nor a
// deadline's, and returns it.
func readFailure(t *testing.T, s *Conn, b []byte) error {
	t.Helper()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := s.Read(b); err != nil {
			assert.NotErrorIs(t, err, io.EOF)
			assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
			return err
		}
	}
}

func TestRndvRawPeer(t *testing.T) {
	ln := listen(t, softConfig())
	payload := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB

	t.Run("honest", func(t *testing.T) {
		r, s := acceptRaw(t, ln, marshalHello)
		assert.Equal(t, streamconn.SoftRndvThreshold, s.c.RndvMin, "version 4 agreed: soft's threshold")
		mr := r.expose(t, payload, verbs.AccessRemoteRead)
		r.write(t, 0, []byte("head"), immData(4))
		r.sendRndv(t, stream.RndvMsg{Addr: mr.Addr(), Len: uint32(len(payload)), Key: mr.RKey()})
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, 4+len(payload))
		_, err := io.ReadFull(s, got)
		require.NoError(t, err)
		assert.Equal(t, "head", string(got[:4]))
		assert.True(t, bytes.Equal(payload, got[4:]))
		assert.True(t, r.awaitImm(t, immCtl(stream.CtlRndvDone), 5*time.Second), "the done message")
		// After the done message, data again.
		r.write(t, 4, []byte("tail"), immData(4))
		_, err = io.ReadFull(s, got[:4])
		require.NoError(t, err)
		assert.Equal(t, "tail", string(got[:4]))
	})

	// What the device refuses: the Read fails, nothing lands outside its
	// slice (the guard bytes after it stay).
	for _, tc := range []struct {
		name string
		msg  func(mr verbs.MR) stream.RndvMsg
		prep func(mr verbs.MR)
	}{
		{"forged rkey", func(mr verbs.MR) stream.RndvMsg {
			return stream.RndvMsg{Addr: mr.Addr(), Len: 4096, Key: mr.RKey() ^ 0x5a5a00}
		}, nil},
		{"stretched", func(mr verbs.MR) stream.RndvMsg {
			return stream.RndvMsg{Addr: mr.Addr(), Len: uint32(mr.Len()) + 4096, Key: mr.RKey()}
		}, nil},
		{"address outside", func(mr verbs.MR) stream.RndvMsg {
			return stream.RndvMsg{Addr: mr.Addr() - 4096, Len: 4096, Key: mr.RKey()}
		}, nil},
		{"stale (deregistered)", func(mr verbs.MR) stream.RndvMsg {
			return stream.RndvMsg{Addr: mr.Addr(), Len: uint32(mr.Len()), Key: mr.RKey()}
		}, func(mr verbs.MR) { mr.Dereg() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s := acceptRaw(t, ln, marshalHello)
			mr := r.expose(t, payload, verbs.AccessRemoteRead)
			if tc.prep != nil {
				tc.prep(mr)
			}
			r.sendRndv(t, tc.msg(mr))
			dst := allocBuffer(t, 256<<10)
			guard := dst.Bytes()[128<<10:]
			for i := range guard {
				guard[i] = 0xee
			}
			err := readFailure(t, s, dst.Bytes()[:128<<10])
			assert.ErrorIs(t, err, syscall.EACCES, "%v", err)
			assert.Equal(t, bytes.Repeat([]byte{0xee}, len(guard)), guard, "nothing beyond the Read's slice")
		})
	}

	// What the stream's rules refuse: a protocol error.
	good := func(t *testing.T, r *rawPeer) stream.RndvMsg {
		mr := r.expose(t, payload, verbs.AccessRemoteRead)
		return stream.RndvMsg{Addr: mr.Addr(), Len: uint32(len(payload)), Key: mr.RKey()}
	}
	for _, tc := range []struct {
		name string
		play func(t *testing.T, r *rawPeer)
	}{
		{"replayed while pending", func(t *testing.T, r *rawPeer) {
			m := good(t, r)
			r.sendRndv(t, m)
			r.sendRndv(t, m)
		}},
		{"data while pending", func(t *testing.T, r *rawPeer) {
			r.sendRndv(t, good(t, r))
			r.write(t, 0, []byte("x"), immData(1))
		}},
		{"FIN while pending", func(t *testing.T, r *rawPeer) {
			r.sendRndv(t, good(t, r))
			r.write(t, 0, nil, immCtl(ctlFin))
		}},
		{"empty", func(t *testing.T, r *rawPeer) {
			m := good(t, r)
			m.Len = 0
			r.sendRndv(t, m)
		}},
		{"longer than a rendezvous", func(t *testing.T, r *rawPeer) {
			m := good(t, r)
			m.Len = stream.MaxRndvLen + 1
			r.sendRndv(t, m)
		}},
		{"wraps the address space", func(t *testing.T, r *rawPeer) {
			r.sendRndv(t, stream.RndvMsg{Addr: ^uint64(0) - 100, Len: 4096, Key: 1})
		}},
		{"descriptor of the wrong length", func(t *testing.T, r *rawPeer) {
			r.sendRndvBytes(t, make([]byte, stream.RndvMsgLen+1))
		}},
		{"done without a rendezvous", func(t *testing.T, r *rawPeer) {
			r.write(t, 0, nil, immCtl(stream.CtlRndvDone))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s := acceptRaw(t, ln, marshalHello)
			// Hold the reader back until the whole play has landed, so
			// that the breach is seen, not raced by the Read's READ.
			s.c.Core.Mu.Lock()
			tc.play(t, r)
			time.Sleep(50 * time.Millisecond)
			s.c.Core.Mu.Unlock()
			readProtocolError(t, s)
		})
	}

	// A peer of version 3 is sent no descriptor (a Write from a Buffer
	// copies: data immediates), and one it sends is a protocol error.
	t.Run("version 3", func(t *testing.T) {
		r, s := acceptRaw(t, ln, func(h hello) []byte {
			h.version = 3
			return h.marshal()
		})
		assert.Zero(t, s.c.RndvMin, "no rendezvous toward a version 3 peer")
		src := allocBuffer(t, 8<<10)
		_, err := s.Write(src.Bytes())
		require.NoError(t, err)
		wcs := make([]verbs.WC, 16)
		got := 0
		for end := time.Now().Add(5 * time.Second); got < len(src.Bytes()) && time.Now().Before(end); time.Sleep(time.Millisecond) {
			n, err := r.cq.Poll(wcs)
			require.NoError(t, err)
			for _, wc := range wcs[:n] {
				if wc.Opcode == verbs.WCRecvRDMAWithImm {
					require.Equal(t, uint32(0), wc.Imm>>immKindShift, "a data immediate, not %#x", wc.Imm)
					got += int(wc.ByteLen)
				}
			}
		}
		require.Equal(t, len(src.Bytes()), got, "the Write's bytes came as data")
		r.sendRndv(t, good(t, r))
		readProtocolError(t, s)
	})

	testsupport.Serves(t, ln, dialer(ln, nil))
}

// A reader that stalls mid-transfer: the raw peer READs part of what the
// conn exposed and then nothing. The Write waits (backpressure) until its
// deadline, returns a timeout and revokes the range: the stalled peer's
// next READ moves nothing, and the conn is failed.
func TestRndvStalledReader(t *testing.T) {
	t.Run("window", func(t *testing.T) { testRndvStalledReader(t, true) })
	t.Run("registration", func(t *testing.T) { testRndvStalledReader(t, false) })
}

// testRndvStalledReader: the range is exposed through the connection's
// memory window, or (windows off) by a registration of its own, which the
// test tracks.
func testRndvStalledReader(t *testing.T, windows bool) {
	cfg := lowRndv(t)
	ln := listen(t, softConfig())
	r, s := acceptRaw(t, ln, marshalHello)
	s.c.Cfg.RendezvousThreshold = cfg.RendezvousThreshold
	s.c.RndvMin = s.c.Handshake().RndvThreshold(stream.Version)
	pd := &trackingPD{PD: s.c.EP.PD, live: map[verbs.MR]verbs.Access{}}
	if !windows {
		prev := setNoWindows(true)
		t.Cleanup(func() { setNoWindows(prev) })
		s.c.EP.PD = pd
	}
	src := allocBuffer(t, 64<<10)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i)
	}
	errc := make(chan error, 1)
	go func() {
		s.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := s.Write(src.Bytes())
		errc <- err
	}()
	require.True(t, r.awaitImm(t, immCtl(stream.CtlRndv), 5*time.Second), "the descriptor")
	m, err := stream.ParseRndvMsg(r.mem.Bytes()[1<<rawRingLog+stream.RndvMsgAt:])
	require.NoError(t, err)
	require.Equal(t, uint32(64<<10), m.Len)

	dstMem, err := verbs.AllocMemory(64 << 10)
	require.NoError(t, err)
	defer dstMem.Free()
	dst, err := r.pd.RegMR(dstMem.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	defer dst.Dereg()
	read := func() verbs.WCStatus { return r.readInto(t, dst, dstMem.Bytes()[:4096], m.Addr, m.Key) }
	require.Equal(t, verbs.WCSuccess, read(), "the range is readable during the transfer")
	assert.Equal(t, src.Bytes()[:4096], dstMem.Bytes()[:4096])

	err = <-errc
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	if windows {
		s.c.Core.Mu.Lock()
		assert.Nil(t, s.c.ZC.Window.MW(), "the window is deallocated when Write returns")
		assert.Equal(t, zerocopy.WindowsChecked, s.c.ZC.Window.Mode(), "the transfer used a window")
		s.c.Core.Mu.Unlock()
	} else {
		assert.Zero(t, pd.remote(), "the range exposed to the peer is deregistered when Write returns")
	}
	// Revoked, and the conn failed and disconnected: the READ is refused
	// (remote access error) or flushed (the QP already went to error), and
	// moves nothing.
	clear(dstMem.Bytes())
	st := read()
	assert.Contains(t, []verbs.WCStatus{verbs.WCRemAccessErr, verbs.WCWRFlushErr}, st, "%v", st)
	assert.Equal(t, make([]byte, 4096), dstMem.Bytes()[:4096])
	_, err = s.Write([]byte("x"))
	assert.Error(t, err, "the stream cannot go on")
	assert.ErrorIs(t, src.Free(), ErrBufferBusy, "held until the queue pair goes")
	s.Close()
	assert.NoError(t, src.Free())
}

// trackingPD records which of a conn's registrations are live, and with
// what access.
type trackingPD struct {
	verbs.PD
	mu   sync.Mutex
	live map[verbs.MR]verbs.Access
}

type trackedMR struct {
	verbs.MR
	pd *trackingPD
}

func (p *trackingPD) RegMR(b []byte, access verbs.Access) (verbs.MR, error) {
	mr, err := p.PD.RegMR(b, access)
	if err != nil {
		return nil, err
	}
	t := &trackedMR{MR: mr, pd: p}
	p.mu.Lock()
	p.live[t] = access
	p.mu.Unlock()
	return t, nil
}

func (m *trackedMR) Dereg() error {
	m.pd.mu.Lock()
	delete(m.pd.live, m)
	m.pd.mu.Unlock()
	return m.MR.Dereg()
}

// remote counts the live registrations with remote READ access (a
// rendezvous exposure; rings take remote WRITE).
func (p *trackingPD) remote() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.live {
		if a&verbs.AccessRemoteRead != 0 {
			n++
		}
	}
	return n
}

// readInto RDMA READs len(into) bytes at addr under key into into (in
// dst) and returns the READ's completion status.
func (r *rawPeer) readInto(t *testing.T, dst verbs.MR, into []byte, addr uint64, key uint32) verbs.WCStatus {
	t.Helper()
	const readWRID = 77
	require.NoError(t, r.qp.PostSend([]verbs.SendWR{{WRID: readWRID, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{verbs.SGEOf(dst, into)}, RemoteAddr: addr, RKey: key}}))
	wcs := make([]verbs.WC, 4)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		n, err := r.cq.Poll(wcs)
		require.NoError(t, err)
		for _, wc := range wcs[:n] {
			if wc.WRID == readWRID {
				return wc.Status
			}
		}
	}
	t.Fatal("no READ completion")
	return 0
}

// A rendezvous Write through the connection's memory window: the peer
// READs the range, says done, and the Write returns; from then on the
// rkey the descriptor carried reaches nothing (the window was
// invalidated before the Write returned). The next Write binds the window
// again under another rkey.
func TestRndvWindowRevoked(t *testing.T) {
	cfg := lowRndv(t)
	ln := listen(t, softConfig())
	r, s := acceptRaw(t, ln, marshalHello)
	s.c.Cfg.RendezvousThreshold = cfg.RendezvousThreshold
	s.c.RndvMin = s.c.Handshake().RndvThreshold(stream.Version)
	src := allocBuffer(t, 64<<10)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 7)
	}
	dstMem, err := verbs.AllocMemory(64 << 10)
	require.NoError(t, err)
	defer dstMem.Free()
	dst, err := r.pd.RegMR(dstMem.Bytes(), verbs.AccessLocalWrite)
	require.NoError(t, err)
	defer dst.Dereg()

	var keys []uint32
	var m stream.RndvMsg
	for i := range 2 {
		errc := make(chan error, 1)
		go func() {
			s.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, err := s.Write(src.Bytes())
			errc <- err
		}()
		require.True(t, r.awaitImm(t, immCtl(stream.CtlRndv), 5*time.Second), "descriptor %d", i)
		m, err = stream.ParseRndvMsg(r.mem.Bytes()[1<<rawRingLog+stream.RndvMsgAt:])
		require.NoError(t, err)
		require.Equal(t, verbs.AddrOf(src.Bytes()), m.Addr)
		keys = append(keys, m.Key)
		clear(dstMem.Bytes())
		require.Equal(t, verbs.WCSuccess, r.readInto(t, dst, dstMem.Bytes(), m.Addr, m.Key))
		require.Equal(t, src.Bytes(), dstMem.Bytes())
		r.write(t, 0, nil, immCtl(stream.CtlRndvDone))
		require.NoError(t, <-errc)
	}
	s.c.Core.Mu.Lock()
	require.Equal(t, zerocopy.WindowsChecked, s.c.ZC.Window.Mode(), "the Writes used the window")
	require.NotNil(t, s.c.ZC.Window.MW())
	s.c.Core.Mu.Unlock()
	assert.NotEqual(t, keys[0], keys[1], "each bind gives the window a new rkey")
	// The Write returned: its rkey reaches nothing any more.
	clear(dstMem.Bytes())
	assert.Equal(t, verbs.WCRemAccessErr, r.readInto(t, dst, dstMem.Bytes()[:4096], m.Addr, m.Key))
	assert.Equal(t, make([]byte, 4096), dstMem.Bytes()[:4096])
}
