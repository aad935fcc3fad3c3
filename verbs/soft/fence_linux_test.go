//go:build linux

package soft

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// The tests in this file play a peer that stalls in the middle of an
// access (its own socket or ring left unread, or a payload left half sent)
// while this side deregisters the region, then fills the region with a
// secret (what a program does with memory it took back) and lets the
// peer go on. Nothing the peer sends may land in the region after Dereg
// returned, nothing it receives may come from there, and Dereg must not
// wait for it.

const (
	fenceLen    = 32 << 20 // what the peer asks to move
	fenceChunk  = 1 << 20  // what moves before it stalls
	fencePublic = 0x11     // the region's bytes before Dereg
	fenceSecret = 0xee     // and after
)

// fenceEnds is a QP whose engine runs over a real transport, and the raw
// other end of that transport, driven by the test as the peer.
type fenceEnds struct {
	q    *qp
	cq   *cq
	mem  *verbs.Memory
	mr   verbs.MR
	peer transport
}

func newFenceEnds(t *testing.T, path string) *fenceEnds {
	t.Helper()
	var mine, peer transport
	switch path {
	case "tcp":
		a, b := tcpPair(t)
		ta, err := newTCPTransport(a)
		require.NoError(t, err)
		tb, err := newTCPTransport(b)
		require.NoError(t, err)
		mine, peer = ta, tb
	case "shm":
		a, b := shmPair(t)
		mine, peer = a, b
	}
	ctx := &device{}
	p, err := ctx.AllocPD()
	require.NoError(t, err)
	cqi, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	q, err := newQP(p.(*pd), &verbs.QPInitAttr{SendCQ: cqi, RecvCQ: cqi,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	mem, err := verbs.AllocMemory(fenceLen)
	require.NoError(t, err)
	fill(mem.Bytes(), fencePublic)
	m, err := p.RegMR(mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	q.mu.Lock()
	q.state = verbs.QPSRTS
	q.mu.Unlock()
	q.start(mine, &hsMsg{qpn: 1, sqDepth: 4}, nil)
	q.startReceiver(nil)
	e := &fenceEnds{q: q, cq: cqi.(*cq), mem: mem, mr: m, peer: peer}
	t.Cleanup(func() {
		_ = q.Destroy()
		_ = m.Dereg()
		_ = mem.Free()
	})
	return e
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// send writes a frame header from the peer, with the first part of its
// payload.
func (e *fenceEnds) send(t *testing.T, h header, part []byte) {
	t.Helper()
	var hb [hdrLen]byte
	h.encode(&hb)
	_, err := e.peer.writev([][]byte{hb[:], part}, nil, true)
	require.NoError(t, err)
}

// sendRest writes n more payload bytes of v from the peer, in the
// background (the engine may be skipping them as they come).
func (e *fenceEnds) sendRest(n int, v byte) chan error {
	done := make(chan error, 1)
	go func() {
		b := bytes.Repeat([]byte{v}, fenceChunk)
		for n > 0 {
			k := min(n, len(b))
			if _, err := e.peer.writev([][]byte{b[:k]}, nil, true); err != nil {
				done <- err
				return
			}
			n -= k
		}
		done <- nil
	}()
	return done
}

// dereg deregisters the region, which must return though the peer stalls,
// and then fills the memory with the secret.
func (e *fenceEnds) dereg(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.mr.Dereg() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Dereg waited for the stalled peer")
	}
	fill(e.mem.Bytes(), fenceSecret)
}

// untouched checks that the region holds only the secret.
func (e *fenceEnds) untouched(t *testing.T) {
	t.Helper()
	for i, c := range e.mem.Bytes() {
		if c != fenceSecret {
			t.Fatalf("byte %d of the region changed after Dereg returned (%#x)", i, c)
		}
	}
}

// frames reads what the engine sends to the peer until the stream ends or
// one frame of type want arrives (returned), failing the test if a payload
// carries a secret byte.
func (e *fenceEnds) frames(t *testing.T, want uint8) (header, error) {
	t.Helper()
	require.NoError(t, e.peer.setReadDeadline(time.Now().Add(20*time.Second)))
	buf := make([]byte, fenceChunk)
	for {
		var hb [hdrLen]byte
		if err := e.peer.readHeader(&hb); err != nil {
			return header{}, err
		}
		var h header
		require.NoError(t, h.decode(&hb))
		for n := h.payloadLen(); n > 0; {
			k := min(n, len(buf))
			if err := e.peer.readPayload(buf[:k], gateRef{}); err != nil {
				return h, err
			}
			if bytes.IndexByte(buf[:k], fenceSecret) >= 0 {
				t.Fatal("the peer received bytes the region held after Dereg returned")
			}
			n -= k
		}
		if h.typ == want {
			return h, nil
		}
	}
}

// landed waits until the first n bytes of the region hold v.
func (e *fenceEnds) landed(t *testing.T, n int, v byte) {
	t.Helper()
	b := e.mem.Bytes()
	require.Eventually(t, func() bool { return b[n-1] == v }, 10*time.Second, time.Millisecond)
}

func (e *fenceEnds) completion(t *testing.T) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	var got atomic.Bool
	require.Eventually(t, func() bool {
		n, err := e.cq.Poll(wc)
		require.NoError(t, err)
		if n == 1 {
			got.Store(true)
		}
		return got.Load()
	}, 10*time.Second, time.Millisecond)
	return wc[0]
}

func fencePaths(t *testing.T, f func(t *testing.T, path string)) {
	for _, path := range []string{"tcp", "shm"} {
		t.Run(path, func(t *testing.T) { f(t, path) })
	}
}

// A WRITE whose payload the peer feeds slowly: what comes after Dereg is
// skipped, and the peer gets a remote access error.
func TestFenceWriteInFlight(t *testing.T) {
	for _, op := range []uint8{frameWrite, frameWriteImm} {
		t.Run(fmt.Sprint("op", op), func(t *testing.T) {
			fencePaths(t, func(t *testing.T, path string) {
				e := newFenceEnds(t, path)
				if op == frameWriteImm {
					require.NoError(t, e.q.PostRecv([]verbs.RecvWR{{WRID: 7}}))
				}
				e.send(t, header{typ: op, len: fenceLen, rkey: e.mr.RKey(), raddr: e.mr.Addr()},
					bytes.Repeat([]byte{0x55}, fenceChunk))
				e.landed(t, fenceChunk, 0x55)
				e.dereg(t)
				rest := e.sendRest(fenceLen-fenceChunk, 0x66)
				h, err := e.frames(t, frameNak)
				require.NoError(t, err)
				assert.Equal(t, uint32(nakRemAccess), h.imm&^0xff)
				require.NoError(t, <-rest)
				e.untouched(t)
				if op == frameWriteImm {
					wc := e.completion(t)
					assert.Equal(t, uint64(7), wc.WRID)
					assert.NotEqual(t, verbs.WCSuccess, wc.Status)
				}
			})
		})
	}
}

// A SEND into a receive buffer whose region is deregistered while the
// payload comes: the rest is skipped, the receive fails.
func TestFenceSendInFlight(t *testing.T) {
	fencePaths(t, func(t *testing.T, path string) {
		e := newFenceEnds(t, path)
		require.NoError(t, e.q.PostRecv([]verbs.RecvWR{{WRID: 9, SG: []verbs.SGE{verbs.SGEOf(e.mr, e.mem.Bytes())}}}))
		e.send(t, header{typ: frameSend, len: fenceLen}, bytes.Repeat([]byte{0x55}, fenceChunk))
		e.landed(t, fenceChunk, 0x55)
		e.dereg(t)
		rest := e.sendRest(fenceLen-fenceChunk, 0x66)
		h, err := e.frames(t, frameNak)
		require.NoError(t, err)
		assert.Equal(t, uint32(nakRemOp), h.imm&^0xff)
		require.NoError(t, <-rest)
		e.untouched(t)
		wc := e.completion(t)
		assert.Equal(t, uint64(9), wc.WRID)
		assert.Equal(t, verbs.WCLocProtErr, wc.Status)
	})
}

// A READ whose response the peer does not take: once Dereg returns,
// nothing more of the region goes out; the connection ends instead of the
// response.
func TestFenceReadInFlight(t *testing.T) {
	fencePaths(t, func(t *testing.T, path string) {
		e := newFenceEnds(t, path)
		e.send(t, header{typ: frameReadReq, len: fenceLen, rkey: e.mr.RKey(), raddr: e.mr.Addr()}, nil)
		// The response starts: the socket or ring fills and the engine's
		// sender waits for the peer.
		require.Eventually(t, func() bool {
			e.q.mu.Lock()
			defer e.q.mu.Unlock()
			return e.q.rcv.respHead == e.q.rcv.respTail && e.q.txBusy
		}, 10*time.Second, time.Millisecond)
		e.dereg(t)
		_, err := e.frames(t, 0)
		require.Error(t, err, "the response cannot have been finished")
	})
}

// The same on the requesting side: the region a READ's response lands in,
// and the region a WRITE is sent from, deregistered while the peer stalls.
func TestFenceLocalBuffersInFlight(t *testing.T) {
	t.Run("read response", func(t *testing.T) {
		fencePaths(t, func(t *testing.T, path string) {
			e := newFenceEnds(t, path)
			require.NoError(t, e.q.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{verbs.SGEOf(e.mr, e.mem.Bytes())}, RKey: 1, RemoteAddr: 4096}}))
			h, err := e.frames(t, frameReadReq)
			require.NoError(t, err)
			e.send(t, header{typ: frameReadResp, psn: h.psn, len: h.len}, bytes.Repeat([]byte{0x55}, fenceChunk))
			e.landed(t, fenceChunk, 0x55)
			e.dereg(t)
			require.NoError(t, <-e.sendRest(fenceLen-fenceChunk, 0x66))
			wc := e.completion(t)
			assert.Equal(t, uint64(3), wc.WRID)
			assert.Equal(t, verbs.WCLocProtErr, wc.Status)
			e.untouched(t)
		})
	})
	t.Run("write source", func(t *testing.T) {
		fencePaths(t, func(t *testing.T, path string) {
			e := newFenceEnds(t, path)
			require.NoError(t, e.q.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.OpRDMAWrite,
				SG: []verbs.SGE{verbs.SGEOf(e.mr, e.mem.Bytes())}, RKey: 1, RemoteAddr: 4096}}))
			require.Eventually(t, func() bool {
				e.q.mu.Lock()
				defer e.q.mu.Unlock()
				return e.q.snd.sqSent == e.q.snd.sqTail && e.q.txBusy
			}, 10*time.Second, time.Millisecond)
			e.dereg(t)
			_, err := e.frames(t, 0)
			require.Error(t, err)
			if !errors.Is(err, errProtocol) {
				wc := e.completion(t)
				assert.Equal(t, uint64(4), wc.WRID)
				assert.NotEqual(t, verbs.WCSuccess, wc.Status)
			}
		})
	})
}
