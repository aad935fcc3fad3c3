package streamconn

import (
	"os"

	"github.com/rdmanet/rdma/internal/core"
	"github.com/rdmanet/rdma/internal/regmem"
	"github.com/rdmanet/rdma/internal/stream"
	"github.com/rdmanet/rdma/verbs"
)

// endpoint is rdma.Conn's memory layout on its verbs objects (Conn.EP,
// internal/core's Endpoint, which creates them in the verbs' dependency
// order and releases them in the order the verbs require): in the one
// block of registered memory, the receive ring, the send buffer and the
// inline staging; the queue depths the device granted; and the ring and
// send buffer once they have grown. The rsocket wire lays out its own
// (internal/rsocketconn).
type endpoint struct {
	// Our receive ring, written by the peer; its mailbox (the peer's ring
	// offers, ringgrowth.go) follows it, up to its capacity.
	Ring    []byte
	ibuf    []byte // staging for inline sends: one slot of inline bytes per send WR
	inline  int    // largest write sent inline
	sendWRs int    // send WRs data and credits may occupy (rdma.Conn's QP has one more, for probes)
	recvWRs int    // receive WRs
	// rdma.Conn's alone:
	Slots  int // send WRs that can be outstanding (sq, plus a probe), and a spare
	rdAtom int // RDMA READs in flight, as initiator and as responder (ConnParam)

	// The ring and send buffer once they have grown (ringgrowth.go):
	// nil until the first growth.
	Grow *growth
}

// newEndpoint creates a connection's verbs resources on id (whose device
// is known: route resolved, or a connect request). The send buffer starts
// at GrowStart bytes at most, and so does the ring if grow (the peer
// speaks a protocol whose rings move; ringgrowth.go); they grow to
// Config's sizes under load. On failure it releases what it created (not
// ech and id, which stay the caller's).
func newEndpoint(ep *core.Endpoint, provider string, ech verbs.EventChannel, id verbs.CMID, cfg Config, grow bool) (e endpoint, sbuf []byte, err error) {
	ep.Events, ep.ID = ech, id
	defer func() {
		if err != nil {
			e.release(ep, 0)
		}
	}()
	ctx, attr, err := core.DeviceOf(id)
	if err != nil {
		return e, nil, err
	}
	sq, rq := core.FitQueues(attr, cfg.SendDepth, cfg.RecvDepth, 1)
	if sq < 4 || rq < stream.MinRecvDepth {
		return e, nil, verbs.Errorf("ibv_create_qp", 0, "device queues too small (max WR %d, max CQE %d)", attr.MaxQPWR, attr.MaxCQE)
	}
	inline := min(cfg.InlineThreshold, attr.MaxInlineData)
	e.rdAtom = min(maxRdAtom, attr.MaxQPRdAtom, attr.MaxQPInitRdAtom)
	if provider == "soft" {
		// The soft provider copies a send's bytes out of registered
		// memory either way; inline would only add a copy, and per
		// connection SendDepth slots of staging here and in its QP.
		inline = 0
	}

	ringSize, sbufSize := cfg.RingSize, min(cfg.SendBufferSize, GrowStart)
	if grow {
		ringSize = min(ringSize, GrowStart)
	}
	e.Slots = sq + 2
	ibufSize := max(e.Slots*inline, 64)
	ringAt := ringOffset(ibufSize+ctlStaging, sbufSize)
	ringEnd := ringAt + ringSize + stream.MailboxLen
	all, err := ep.Allocate(ringEnd)
	if err != nil {
		return e, nil, err
	}
	e.ibuf = all[:ibufSize:ibufSize]
	sbuf = all[ringAt-sbufSize : ringAt : ringAt]
	e.Ring = all[ringAt : ringAt+ringSize : ringEnd]
	if err = ep.Register(ctx, all[ringAt:ringEnd], all[:ringAt]); err != nil {
		return e, nil, err
	}
	qc := verbs.QPCap{MaxSendWR: sq + 1, MaxRecvWR: rq, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: inline}
	if err = ep.CreateQP(ctx, &qc); err != nil {
		return e, nil, err
	}
	e.inline = min(inline, qc.MaxInlineData)
	e.sendWRs, e.recvWRs = sq, rq
	return e, sbuf, nil
}

// ctlStaging is the staging of control messages that carry bytes, after
// the inline staging: a rendezvous descriptor (one out at a time).
const ctlStaging = 32

// ctlStagingBytes is that staging.
func (c rendezvous) ctlStagingBytes() []byte {
	at := len(c.ibuf)
	return c.EP.Mem.Bytes()[at : at+ctlStaging : at+ctlStaging]
}

// ringOffset places the receive ring in a connection's memory block,
// which holds the inline staging, then the send buffer (sbufSize bytes),
// then the ring: the ring starts half a page into a page, right after the
// send buffer, so that the send buffer's last half page and the ring's
// first half page are one page. A connection's first writes start in that
// last half page (sendStart), and the peer's first writes land at the
// ring's start: where memory is resident only once touched (the soft
// provider's; a NIC pins it all at registration), a connection that
// exchanged a few small messages has touched one page of the block, not
// two, and faulting in a page is a good part of a connection's setup.
func ringOffset(ibufSize, sbufSize int) int {
	page := os.Getpagesize()
	half := page / 2
	return (ibufSize+sbufSize-half+page-1)/page*page + half
}

// release destroys the verbs objects newEndpoint created, in the order the
// verbs require, after acknowledging the completion events taken and not
// yet acknowledged. The ID and event channel are the caller's.
func (e *endpoint) release(ep *core.Endpoint, unacked int) {
	ep.ReleaseQueues(unacked)
	if e.Grow != nil {
		e.Grow.release()
	}
	ep.ReleaseMemory()
	if e.Grow != nil {
		regmem.Free(e.Grow.ringMem)
		regmem.Free(e.Grow.sendMem)
		e.Grow = nil
	}
}

// recvBatch is the most receive WRs posted in one call: every one is the
// same (no SGE, the data lands in the ring), so a few serve any number,
// and every connection posts the same few (recvWRs: a provider only reads
// the WRs it is given).
const recvBatch = 16

var recvWRs = func() (w [recvBatch]verbs.RecvWR) {
	for i := range w {
		w[i].WRID = recvWRID
	}
	return w
}()

// maxRdAtom bounds the RDMA READs a connection has in flight, each way
// (the device may grant fewer).
const maxRdAtom = 16

// maxChunk bounds one RDMA write, so that the reader starts on a long Write
// before all of it has landed.
const maxChunk = 64 << 10

// softMaxChunk is maxChunk on the soft provider, whose writes land as they
// are read from the transport, not a chunk at a time: each chunk costs it a
// work request, a frame and a completion, and on the TCP path a writev and
// its reads, so a Write of 1 MiB went out in 17 frames. With 256 KiB (a
// quarter of the default ring) a 1 MiB stream moved 0.62-0.66x -> 0.97-0.98x
// TCP's rate on the TCP path and 2.5-2.9x -> 3.3-3.5x on shared memory
// (docs/measurements/2026-11-29-soft-chunk.md).
const softMaxChunk = 256 << 10
