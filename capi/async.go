package capi

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// MaxInFlight bounds the asynchronous requests of one context that have not
// completed; one more fails with ErrBusy.
const MaxInFlight = 4096

var (
	// ErrBusy is matched by the error of an ISend or IRecv beyond
	// MaxInFlight.
	ErrBusy = errors.New("too many requests in flight")
	// ErrCanceled is the status of a request that had not started when its
	// context was closed.
	ErrCanceled = errors.New("cancelled: the context was closed")
)

// Request is an asynchronous send or receive. Its buffer belongs to the
// request until it completes: the caller must neither change (ISend) nor
// read (IRecv) it before Wait, Test or WaitAny report completion.
type Request struct {
	done chan struct{}
	n    int
	err  error
}

// Wait blocks until r completes and returns its result: the bytes sent or
// the length of the message received, or the error.
func (r *Request) Wait() (int, error) {
	<-r.done
	return r.n, r.err
}

// Test reports whether r has completed, and if so its result.
func (r *Request) Test() (done bool, n int, err error) {
	select {
	case <-r.done:
		return true, r.n, r.err
	default:
		return false, 0, nil
	}
}

// WaitAny blocks until one of reqs completes and returns its index and
// result; nil entries are skipped. With no request it fails at once.
func WaitAny(reqs []*Request) (int, int, error) {
	cases := make([]reflect.SelectCase, 0, len(reqs))
	index := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if r == nil {
			continue
		}
		select {
		case <-r.done:
			return i, r.n, r.err
		default:
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.done)})
		index = append(index, i)
	}
	if len(cases) == 0 {
		return -1, 0, fmt.Errorf("capi: wait any: %w: no requests", ErrInvalidArgument)
	}
	chosen, _, _ := reflect.Select(cases)
	r := reqs[index[chosen]]
	return index[chosen], r.n, r.err
}

// fifo orders the requests of one peer and direction: each takes a ticket
// when it is posted and runs when its number comes up, so messages between
// two contexts never overtake each other, however many are in flight.
type fifo struct {
	mu      sync.Mutex
	cond    sync.Cond // on mu; see init
	next    uint64    // the ticket the next request gets
	serving uint64    // the ticket that may run
}

func (f *fifo) init() { f.cond.L = &f.mu }

func (f *fifo) take() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.next
	f.next++
	return t
}

func (f *fifo) await(t uint64) {
	f.mu.Lock()
	for f.serving != t {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

func (f *fifo) advance() {
	f.mu.Lock()
	f.serving++
	f.cond.Broadcast()
	f.mu.Unlock()
}

// ISend starts sending data as one message to peer idx and returns at once.
func (c *Context) ISend(idx int, data []byte) (*Request, error) {
	p, err := c.peers.live("isend to", idx)
	if err != nil {
		return nil, err
	}
	if len(data) > c.bufSize {
		return nil, fmt.Errorf("capi: isend to peer %d: %w: %d bytes exceed the context's buffer size of %d bytes",
			idx, ErrMessageTooLong, len(data), c.bufSize)
	}
	return c.requests.start("isend to", p, &p.sendFIFO, func() (int, error) {
		if err := p.send(data); err != nil {
			return -1, err
		}
		return len(data), nil
	}, nil)
}

// IRecv starts receiving the next message of peer idx into buf and
// returns at once. The request's result is as Recv's.
func (c *Context) IRecv(idx int, buf []byte) (*Request, error) {
	p, err := c.peers.live("irecv from", idx)
	if err != nil {
		return nil, err
	}
	return c.requests.start("irecv from", p, &p.recvFIFO, func() (int, error) {
		return p.recv(buf, nil)
	}, nil)
}

// requestQueue runs a context's asynchronous requests, each on a goroutine
// of its own: it bounds them (MaxInFlight), cancels those that had not
// started when it is closed, and lets Close wait for them all.
type requestQueue struct {
	mu       sync.Mutex
	inFlight int            // requests not completed
	running  sync.WaitGroup // their goroutines
	closed   bool
}

func newRequestQueue() *requestQueue { return &requestQueue{} }

// start runs run as a request on p, after the requests before it in f (nil:
// in no order). cancel, if not nil, is called instead of run when the
// request is cancelled.
func (q *requestQueue) start(op string, p *peer, f *fifo, run func() (int, error), cancel func()) (*Request, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, fmt.Errorf("capi: %s peer %d: %w", op, p.idx, ErrClosed)
	}
	if q.inFlight >= MaxInFlight {
		q.mu.Unlock()
		return nil, fmt.Errorf("capi: %s peer %d: %w (%d)", op, p.idx, ErrBusy, MaxInFlight)
	}
	q.inFlight++
	q.running.Add(1)
	q.mu.Unlock()

	r := &Request{done: make(chan struct{})}
	var ticket uint64
	if f != nil {
		ticket = f.take()
	}
	go func() {
		defer q.running.Done()
		if f != nil {
			f.await(ticket)
		}
		if q.isClosed() {
			if cancel != nil {
				cancel()
			}
			r.n, r.err = -1, fmt.Errorf("capi: %s peer %d: %w", op, p.idx, ErrCanceled)
		} else if r.n, r.err = run(); r.err != nil && q.isClosed() {
			r.err = fmt.Errorf("%w (%w)", r.err, ErrCanceled)
		}
		if f != nil {
			f.advance()
		}
		q.mu.Lock()
		q.inFlight--
		q.mu.Unlock()
		close(r.done)
	}()
	return r, nil
}

func (q *requestQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// close refuses new requests and cancels those that have not started.
func (q *requestQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// wait returns once every request has completed.
func (q *requestQueue) wait() { q.running.Wait() }
