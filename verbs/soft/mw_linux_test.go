//go:build linux

package soft

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdma/verbs"
)

// The fence of a memory window against a peer that stalls in the middle
// of an access through it, as fence_linux_test.go plays it for a region:
// the invalidation must complete without waiting for the peer, and
// nothing may move through the window after its completion. The region
// stays registered.

// bindFenceWindow binds a window over the whole of e's memory on e's QP,
// through a second region that allows binds, and returns its rkey.
func bindFenceWindow(t *testing.T, e *fenceEnds, access verbs.Access) uint32 {
	rkey, _ := bindFenceWindowW(t, e, access)
	return rkey
}

// bindFenceWindowW is bindFenceWindow, and the bind it posted.
func bindFenceWindowW(t *testing.T, e *fenceEnds, access verbs.Access) (uint32, *verbs.MWBind) {
	t.Helper()
	p := e.q.pd
	m, err := p.RegMR(e.mem.Bytes(), verbs.AccessLocalWrite|verbs.AccessMWBind)
	require.NoError(t, err)
	w, err := p.AllocMW()
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = w.Dealloc()
		_ = m.Dereg()
	})
	b := &verbs.MWBind{MW: w, MR: m, Addr: m.Addr(), Length: uint64(len(e.mem.Bytes())), Access: access,
		RKey: verbs.NextRKey(w.RKey())}
	require.NoError(t, e.q.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: b}}))
	wc := e.completion(t)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, verbs.WCBindMW, wc.Opcode)
	return b.RKey, b
}

// invalidate invalidates rkey on e's QP, which must complete though the
// peer stalls, and then fills the memory with the secret.
func (e *fenceEnds) invalidate(t *testing.T, rkey uint32) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- e.q.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey}})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the invalidation waited for the stalled peer")
	}
	wc := e.completion(t)
	require.Equal(t, uint64(2), wc.WRID)
	require.Equal(t, verbs.WCSuccess, wc.Status)
	require.Equal(t, verbs.WCLocalInv, wc.Opcode)
	fill(e.mem.Bytes(), fenceSecret)
}

// A WRITE through the window whose payload the peer feeds slowly: what
// comes after the invalidation is skipped, and the peer gets a remote
// access error.
func TestMWFenceWriteInFlight(t *testing.T) {
	fencePaths(t, func(t *testing.T, path string) {
		e := newFenceEnds(t, path)
		rkey := bindFenceWindow(t, e, verbs.AccessRemoteWrite)
		e.send(t, header{typ: frameWrite, len: fenceLen, rkey: rkey, raddr: e.mr.Addr()},
			bytes.Repeat([]byte{0x55}, fenceChunk))
		e.landed(t, fenceChunk, 0x55)
		e.invalidate(t, rkey)
		rest := e.sendRest(fenceLen-fenceChunk, 0x66)
		h, err := e.frames(t, frameNak)
		require.NoError(t, err)
		assert.Equal(t, uint32(nakRemAccess), h.imm&^0xff)
		require.NoError(t, <-rest)
		e.untouched(t)
	})
}

// A READ through the window whose response the peer does not take: once
// the invalidation has completed, nothing more goes out; the connection
// ends instead of the response.
func TestMWFenceReadInFlight(t *testing.T) {
	fencePaths(t, func(t *testing.T, path string) {
		e := newFenceEnds(t, path)
		rkey := bindFenceWindow(t, e, verbs.AccessRemoteRead)
		e.send(t, header{typ: frameReadReq, len: fenceLen, rkey: rkey, raddr: e.mr.Addr()}, nil)
		awaitResponseStuck(t, e)
		e.invalidate(t, rkey)
		_, err := e.frames(t, 0)
		require.Error(t, err, "the response cannot have been finished")
	})
}

// A READ response that the peer does not take, queued under one bind of
// the window: once that bind is invalidated nothing more of it goes out,
// though the window is bound again over the same memory (which then holds
// the secret) before the transmitter can notice the invalidation: the
// invalidation and the new bind are posted together, and execute as they
// are posted. The window reuses its binding from bind to bind; the
// response was admitted under the earlier one.
func TestMWFenceReadInFlightRebound(t *testing.T) {
	fencePaths(t, func(t *testing.T, path string) {
		e := newFenceEnds(t, path)
		rkey, b := bindFenceWindowW(t, e, verbs.AccessRemoteRead)
		e.send(t, header{typ: frameReadReq, len: fenceLen, rkey: rkey, raddr: e.mr.Addr()}, nil)
		awaitResponseStuck(t, e)
		b2 := *b
		b2.RKey = verbs.NextRKey(rkey)
		require.NoError(t, e.q.PostSend([]verbs.SendWR{
			{WRID: 2, Opcode: verbs.OpLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey},
			{WRID: 3, Opcode: verbs.OpBindMW, Flags: verbs.SendSignaled, Bind: &b2}}))
		fill(e.mem.Bytes(), fenceSecret)
		for _, want := range []verbs.WCOpcode{verbs.WCLocalInv, verbs.WCBindMW} {
			wc := e.completion(t)
			require.Equal(t, verbs.WCSuccess, wc.Status)
			require.Equal(t, want, wc.Opcode)
		}
		_, err := e.frames(t, 0)
		require.Error(t, err, "the response cannot have been finished")
	})
}

// awaitResponseStuck waits until the READ response has left the responder's
// queue and its transmitter is blocked on it (the peer takes nothing).
func awaitResponseStuck(t *testing.T, e *fenceEnds) {
	t.Helper()
	require.Eventually(t, func() bool {
		e.q.mu.Lock()
		defer e.q.mu.Unlock()
		return e.q.rcv.respHead == e.q.rcv.respTail && e.q.txBusy
	}, 10*time.Second, time.Millisecond)
}
