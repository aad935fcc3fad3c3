//go:build cgo && linux

package rdmacore

import (
	"sync"
	"syscall"
)

// A device reports a CQ overrun only as an asynchronous event
// (IBV_EVENT_CQ_ERR); the completions are lost silently. To turn it into
// verbs.ErrCQOverrun from Poll, a goroutine per device reads the device's
// asynchronous events, parked on the runtime poller, while the device has
// CQs.
type asyncReader struct {
	ctx  ctxPtr
	w    *fdWaiter
	out  asyncOutPtr
	refs int // live CQs on the device
	done chan struct{}
}

var (
	asyncMu sync.Mutex
	readers = map[ctxPtr]*asyncReader{}

	// liveCQs finds the CQ an asynchronous event names.
	cqsMu   sync.Mutex
	liveCQs = map[cqPtr]*cq{}
)

// watchCQ registers q for overrun reports, starting the device's reader.
func watchCQ(q *cq) {
	cqsMu.Lock()
	liveCQs[q.p] = q
	cqsMu.Unlock()
	asyncMu.Lock()
	defer asyncMu.Unlock()
	r := readers[q.ctx]
	if r == nil {
		w, err := newFDWaiter(ibvAsyncFD(q.ctx), "ibv_async_fd")
		if err != nil {
			// Without the reader Poll cannot report overruns; everything else works.
			return
		}
		r = &asyncReader{ctx: q.ctx, w: w, out: allocAsyncOut(), done: make(chan struct{})}
		readers[q.ctx] = r
		go r.run()
	}
	r.refs++
}

// unwatchCQ is called after q is destroyed; the last CQ of a device stops
// its reader, and waits for it, so that no goroutine outlives the CQs.
func unwatchCQ(q *cq) {
	cqsMu.Lock()
	delete(liveCQs, q.p)
	cqsMu.Unlock()
	asyncMu.Lock()
	r := readers[q.ctx]
	if r == nil {
		asyncMu.Unlock()
		return
	}
	r.refs--
	if r.refs > 0 {
		asyncMu.Unlock()
		return
	}
	delete(readers, q.ctx)
	asyncMu.Unlock()
	r.w.close()
	<-r.done
	freeAsyncOut(r.out)
}

func (r *asyncReader) run() {
	defer close(r.done)
	var got cqPtr
	var errno syscall.Errno
	try := func(uintptr) bool {
		got, errno = ibvGetAsyncEvent(r.ctx, r.out)
		return errno != syscall.EAGAIN
	}
	for {
		if err := r.w.wait(try); err != nil {
			return
		}
		if errno != 0 {
			return
		}
		if got != nil {
			cqsMu.Lock()
			q := liveCQs[got]
			cqsMu.Unlock()
			if q != nil {
				q.overflowed()
			}
		}
		// Acknowledge at once: destroying a QP or CQ waits for it.
		ibvAckAsyncEvent(r.out)
	}
}
