package soft

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

func FuzzFrameHeader(f *testing.F) {
	add := func(h header) {
		var b [hdrLen]byte
		h.encode(&b)
		f.Add(b[:])
	}
	add(header{typ: frameSend, flags: flagAck, psn: 1, ack: 1, len: 64})
	add(header{typ: frameWriteImm, flags: flagAck | flagSolicited, psn: 7, len: 1 << 20, imm: 9, rkey: 0x105, raddr: 1 << 40})
	add(header{typ: frameNak, psn: 3, imm: nakRNR | 12})
	add(header{typ: frameDisc})
	f.Add(make([]byte, hdrLen))
	f.Add(bytes.Repeat([]byte{0xff}, hdrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < hdrLen {
			return
		}
		var raw [hdrLen]byte
		copy(raw[:], b)
		var h header
		if err := h.decode(&raw); err != nil {
			return
		}
		// A valid header survives a round trip and names a sane payload.
		var again [hdrLen]byte
		h.encode(&again)
		require.Equal(t, raw, again)
		require.LessOrEqual(t, h.payloadLen(), maxMsgSize)
	})
}

func FuzzHandshake(f *testing.F) {
	for _, m := range []hsMsg{
		{typ: msgREQ, qpn: 17, sqDepth: 64, rqDepth: 64, respRes: 4, initDepth: 4, retry: 7, rnrRetry: 7, transports: transportTCP, priv: []byte("hello")},
		{typ: msgREP, qpn: 18, sqDepth: 16, rqDepth: 0, transports: transportTCP, priv: bytes.Repeat([]byte{1}, 196), ext: []byte{1, 2, 3}},
		{typ: msgREJ, priv: []byte("no")},
		{typ: msgRTU},
		{typ: msgMRA},
		{typ: msgREQ, qpn: 19, sqDepth: 8, rqDepth: 8, transports: transportTCP | transportShm | reqTakesMRA},
	} {
		b, err := m.marshal()
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, n, err := parseHandshakeHeader(b); err == nil {
			require.LessOrEqual(t, n, maxHandshakeBody)
		}
		m, err := parseHandshake(b)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(m.priv), m.privLimit())
		again, err := m.marshal()
		require.NoError(t, err)
		m2, err := parseHandshake(again)
		require.NoError(t, err)
		require.Equal(t, m.typ, m2.typ)
		require.Equal(t, m.qpn, m2.qpn)
		require.Equal(t, m.transports, m2.transports)
		if m.typ == msgREQ || m.typ == msgREP {
			require.NotZero(t, m.transports&^reqTakesMRA, "a REQ or REP offers a transport")
		}
		require.True(t, bytes.Equal(m.priv, m2.priv))
	})
}

// memTransport feeds the engine a fixed byte stream and swallows writes.
type memTransport struct {
	r *bytes.Reader
}

func (m *memTransport) readHeader(h *[hdrLen]byte) error {
	_, err := io.ReadFull(m.r, h[:])
	return err
}
func (m *memTransport) readPayload(dst []byte, _ gateRef) error {
	_, err := io.ReadFull(m.r, dst)
	return err
}
func (m *memTransport) discard(n int) error {
	_, err := io.CopyN(io.Discard, m.r, int64(n))
	return err
}
func (m *memTransport) holds(n int) bool                                     { return m.r.Len() >= n }
func (m *memTransport) setIdle(func(bool) bool)                              {}
func (m *memTransport) interrupt()                                           {}
func (m *memTransport) setSpin(time.Duration) (polled, parked time.Duration) { return 0, 0 }
func (m *memTransport) writev(bufs [][]byte, _ []gateRef, wait bool) (int, error) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n, nil
}
func (m *memTransport) closeWrite() error               { return nil }
func (m *memTransport) setReadDeadline(time.Time) error { return nil }
func (m *memTransport) close() error                    { return nil }
func (m *memTransport) answering() bool                 { return true }

// FuzzEngine runs a connected QP's receiver over an arbitrary byte stream:
// whatever a peer sends, the engine must not panic or touch memory outside
// its MRs.
func FuzzEngine(f *testing.F) {
	frame := func(h header, payload []byte) []byte {
		var b [hdrLen]byte
		h.encode(&b)
		return append(b[:], payload...)
	}
	f.Add(frame(header{typ: frameSend, psn: 0, len: 8}, make([]byte, 8)))
	f.Add(append(frame(header{typ: frameWrite, psn: 0, len: 4, rkey: 0x101}, []byte{1, 2, 3, 4}),
		frame(header{typ: frameReadReq, psn: 1, len: 16, rkey: 0x101}, nil)...))
	f.Add(frame(header{typ: frameAck, flags: flagAck, ack: 5}, nil))
	f.Add(frame(header{typ: frameNak, flags: flagAck, psn: 0, imm: nakRNR | 1}, nil))
	f.Add(frame(header{typ: frameReadResp, psn: 0, len: 8}, make([]byte, 8)))
	f.Fuzz(func(t *testing.T, stream []byte) {
		ctx := &device{}
		p, _ := ctx.AllocPD()
		cqi, _ := ctx.CreateCQ(16, nil)
		q, err := newQP(p.(*pd), &verbs.QPInitAttr{SendCQ: cqi, RecvCQ: cqi, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2}})
		require.NoError(t, err)
		mem, err := verbs.AllocMemory(4096)
		require.NoError(t, err)
		defer mem.Free()
		mri, err := p.RegMR(mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		require.NoError(t, err)
		// Let the stream name the MR: patch rkeys to the real key when asked.
		key := mri.RKey()
		for i := 0; i+hdrLen <= len(stream); i += hdrLen {
			if binary.LittleEndian.Uint32(stream[i+20:]) == 0x101 {
				binary.LittleEndian.PutUint32(stream[i+20:], key)
				binary.LittleEndian.PutUint64(stream[i+24:], mri.Addr())
			}
		}
		q.state = verbs.QPSRTS
		require.NoError(t, q.PostRecv([]verbs.RecvWR{{SG: []verbs.SGE{verbs.SGEOf(mri, mem.Bytes()[:16])}}}))
		q.start(&memTransport{r: bytes.NewReader(stream)}, &hsMsg{qpn: 1, sqDepth: 4}, nil)
		// A READ in flight, so that READ responses and NAKs have a target.
		require.NoError(t, q.PostSend([]verbs.SendWR{{Opcode: verbs.OpRDMARead, SG: []verbs.SGE{verbs.SGEOf(mri, mem.Bytes()[:8])}, RKey: 1}}))
		q.startReceiver(nil)
		require.NoError(t, q.Destroy()) // waits for the receiver, which ends with the stream
		_ = mri.Dereg()
	})
}

// FuzzShmOffer: a REQ's shared-memory offer, whatever its bytes, parses
// into a version, a boot ID, a token and (versions 3 and 4) a ring size within
// the ring limits, or fails; what parses marshals back the same.
func FuzzShmOffer(f *testing.F) {
	boot := "0123456789abcdef0123456789abcdef0123"
	f.Add((&shmOfferExt{version: 2, bootID: boot, token: [16]byte{1, 2, 3}}).marshal())
	f.Add((&shmOfferExt{version: 3, bootID: boot, token: [16]byte{1, 2, 3}, ringSize: defaultShmRing}).marshal())
	f.Add((&shmOfferExt{version: 3, bootID: boot, ringSize: shmRingMax * 2}).marshal())
	f.Add((&shmOfferExt{version: 3, bootID: boot, ringSize: shmRingMin + 1}).marshal())
	f.Add((&shmOfferExt{version: 4, bootID: boot, token: [16]byte{4, 5}, ringSize: shmRingMin}).marshal())
	f.Add((&shmOfferExt{version: 4, bootID: boot, ringSize: shmRingMax + 1}).marshal())
	f.Add([]byte("SHM4"))
	f.Add([]byte("SHM2"))
	f.Add([]byte("SHM3"))
	f.Add(append([]byte("SHM1"), make([]byte, 60)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseShmOffer(b)
		if err != nil {
			return
		}
		require.Len(t, o.bootID, bootIDLen)
		switch o.version {
		case 2:
			require.Zero(t, o.ringSize)
		case 3, 4:
			require.GreaterOrEqual(t, o.ringSize, uint32(shmRingMin))
			require.LessOrEqual(t, o.ringSize, uint32(shmRingMax))
			require.Zero(t, o.ringSize&(o.ringSize-1))
		default:
			t.Fatalf("version %d", o.version)
		}
		require.Equal(t, b, o.marshal())
	})
}

// FuzzShmSetup: a ring setup, whatever its bytes, yields a size within the
// local limit, a power of two, or an error.
func FuzzShmSetup(f *testing.F) {
	var b [shmSetupLen]byte
	marshalShmSetup(&b, 1<<20)
	f.Add(b[:], uint32(1<<20))
	marshalShmSetup(&b, 256<<20)
	f.Add(b[:], uint32(1<<20))
	f.Add([]byte("SRNG"), uint32(1<<16))
	f.Fuzz(func(t *testing.T, b []byte, limit uint32) {
		size, err := parseShmSetup(b, limit)
		if err != nil {
			return
		}
		require.LessOrEqual(t, size, limit)
		require.GreaterOrEqual(t, size, uint32(shmRingMin))
		require.Zero(t, size&(size-1))
	})
}

// The MRA: an empty message; reqTakesMRA is a flag of a REQ, never a
// transport: a REQ or REP with nothing else, or a REP that carries it
// beside its transport, is malformed.
func TestHandshakeMRA(t *testing.T) {
	b, err := (&hsMsg{typ: msgMRA}).marshal()
	require.NoError(t, err)
	m, err := parseHandshake(b)
	require.NoError(t, err)
	require.Equal(t, uint8(msgMRA), m.typ)
	_, err = parseHandshake(append(b[:6:6], 1, 0, 0)) // a body
	require.ErrorIs(t, err, errBadHandshake)

	req := hsMsg{typ: msgREQ, qpn: 1, sqDepth: 8, rqDepth: 8, transports: transportTCP | reqTakesMRA}
	b, err = req.marshal()
	require.NoError(t, err)
	m, err = parseHandshake(b)
	require.NoError(t, err)
	require.Equal(t, uint32(transportTCP|reqTakesMRA), m.transports)
	for _, bad := range []hsMsg{
		{typ: msgREQ, qpn: 1, sqDepth: 8, rqDepth: 8, transports: reqTakesMRA},
		{typ: msgREP, qpn: 1, sqDepth: 8, rqDepth: 8, transports: reqTakesMRA},
		{typ: msgREP, qpn: 1, sqDepth: 8, rqDepth: 8, transports: transportTCP | reqTakesMRA},
	} {
		b, err := bad.marshal()
		require.NoError(t, err)
		_, err = parseHandshake(b)
		require.ErrorIs(t, err, errBadHandshake, "%+v", bad)
	}
}
