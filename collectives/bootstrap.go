package collectives

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// meshDialPatience bounds the retries of a dial to a peer's listener.
const meshDialPatience = 10 * time.Second

// helloTimeout bounds how long a bootstrap listener waits for an accepted
// conn to say who it is.
const helloTimeout = 10 * time.Second

// transport makes the conns of a Group being joined.
type transport struct {
	listen func(ctx context.Context, addr string) (net.Listener, error)
	dial   func(ctx context.Context, local, addr string) (net.Conn, error)
}

// tcpTransport carries a group over kernel TCP.
var tcpTransport = transport{
	listen: func(ctx context.Context, addr string) (net.Listener, error) {
		var lc net.ListenConfig
		return lc.Listen(ctx, "tcp", addr)
	},
	dial: func(ctx context.Context, local, addr string) (net.Conn, error) {
		var d net.Dialer
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		return d.DialContext(ctx, "tcp", addr)
	},
}

// joinError wraps every Join failure.
func joinError(rank int, err error) error {
	return fmt.Errorf("collectives: Join (rank %d): %w", rank, err)
}

// join builds a full mesh for rank of size ranks over tr. local is the IP
// (or host) this rank listens on and dials from; "" means the address its
// conn to the root leaves from.
func join(ctx context.Context, tr transport, secret []byte, rank, size int, rootAddr, local string) (g *Group, err error) {
	if size < 1 || size > maxSize {
		return nil, joinError(rank, fmt.Errorf("size %d: the size of a group is 1 to %d", size, maxSize))
	}
	if rank < 0 || rank >= size {
		return nil, joinError(rank, fmt.Errorf("rank %d out of range [0, %d)", rank, size))
	}
	peers := make([]net.Conn, size)
	if size == 1 {
		return NewGroup(0, peers)
	}
	if rootAddr == "" {
		return nil, joinError(rank, errors.New("no root address"))
	}

	// Everything made here is closed on failure, and on cancellation, which
	// also wakes any blocked Accept, Read or Write.
	var (
		mu        sync.Mutex
		closers   []io.Closer
		cancelled bool
	)
	track := func(c io.Closer) bool {
		mu.Lock()
		defer mu.Unlock()
		closers = append(closers, c)
		if cancelled {
			_ = c.Close()
		}
		return !cancelled
	}
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		cancelled = true
		for _, c := range closers {
			_ = c.Close()
		}
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer func() {
		if !stop() && err == nil {
			// ctx ended just as Join finished: the conns are being closed.
			g.Close()
			g, err = nil, context.Cause(ctx)
		}
		if err != nil {
			closeAll()
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
			}
			err = joinError(rank, err)
		}
	}()
	deadline, _ := ctx.Deadline()

	if rank == 0 {
		if err := rootJoin(ctx, tr, secret, size, rootAddr, peers, track, deadline); err != nil {
			return nil, err
		}
	} else if err := memberJoin(ctx, tr, secret, rank, size, rootAddr, local, peers, track, closeAll, deadline); err != nil {
		return nil, err
	}
	for _, c := range peers {
		if c != nil {
			_ = c.SetDeadline(time.Time{})
		}
	}
	g, err = NewGroup(rank, peers)
	if err != nil {
		return nil, err
	}
	// Nobody returns before every rank has its conns: the group is usable
	// everywhere once Join returns anywhere.
	if err := g.Barrier(ctx); err != nil {
		g.Close()
		return nil, err
	}
	// Then, where every rank is on this host, the same-host segment; the
	// ranks agree on it before any returns.
	if err := setupShm(ctx, g, peers); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

func rootJoin(ctx context.Context, tr transport, secret []byte, size int, rootAddr string, peers []net.Conn, track func(io.Closer) bool, deadline time.Time) error {
	ln, err := tr.listen(ctx, rootAddr)
	if err != nil {
		return err
	}
	if !track(ln) {
		ln.Close()
		return ctx.Err()
	}
	acc := startAcceptor(ln, deadline, func(c net.Conn) (arrival, error) {
		return rootHandshake(c, newProver(secret), size)
	})
	defer acc.stop()
	arrivals := make([]arrival, size)
	for got := 0; got < size-1; {
		select {
		case a := <-acc.arrivals:
			acc.take(a)
			if !track(a.conn) {
				return ctx.Err()
			}
			_ = a.conn.SetDeadline(deadline)
			if peers[a.rank] != nil {
				return fmt.Errorf("two processes say they are rank %d (from %v and %v)", a.rank, peers[a.rank].RemoteAddr(), a.conn.RemoteAddr())
			}
			peers[a.rank], arrivals[a.rank] = a.conn, a
			got++
		case err := <-acc.errc:
			return fmt.Errorf("accepting at %s: %w", rootAddr, err)
		}
	}
	var tok token
	if _, err := crand.Read(tok[:]); err != nil {
		return err
	}
	addrs := make([]string, size-1)
	for r := 1; r < size; r++ {
		addrs[r-1] = arrivals[r].addr
	}
	p := newProver(secret)
	var table []byte
	for r := 1; r < size; r++ {
		table = appendTable(table[:0], p, arrivals[r].nonce, tok, addrs)
		if _, err := peers[r].Write(table); err != nil {
			return &RankError{Rank: r, Op: "bootstrap", Err: err}
		}
	}
	return nil
}

// rootHandshake challenges a conn to the root and reads its hello. A conn
// that speaks the protocol but fails the proof, or does not fit the group,
// is told why before it is dropped.
func rootHandshake(c net.Conn, p *prover, size int) (arrival, error) {
	challenge, err := newNonce()
	if err != nil {
		return arrival{}, err
	}
	if _, err := c.Write(appendChallenge(nil, challenge)); err != nil {
		return arrival{}, err
	}
	h, err := readHello(c, p, challenge, size)
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			_, _ = c.Write(appendRefuse(nil, err.Error()))
		}
		return arrival{}, err
	}
	return arrival{conn: c, rank: h.rank, addr: h.addr, nonce: h.nonce}, nil
}

func memberJoin(ctx context.Context, tr transport, secret []byte, rank, size int, rootAddr, local string, peers []net.Conn, track func(io.Closer) bool, abort func(), deadline time.Time) error {
	var (
		ln     net.Listener
		myAddr string
		tok    token
		addrs  []string
		p      = newProver(secret)
	)
	// A root with no place for this rank's handshake says so (busy): the
	// rank dials again, within ctx.
	for pace := (backoff{}); ; {
		c, err := dialRetry(ctx, tr, local, rootAddr)
		if err != nil {
			return fmt.Errorf("dialing the root at %s: %w", rootAddr, err)
		}
		if !track(c) {
			return ctx.Err()
		}
		if ln == nil {
			if local == "" {
				host, _, err := net.SplitHostPort(c.LocalAddr().String())
				if err != nil {
					return fmt.Errorf("local address %v: %w", c.LocalAddr(), err)
				}
				local = host
			}
			ln, err = tr.listen(ctx, net.JoinHostPort(local, "0"))
			if err != nil {
				return err
			}
			defer ln.Close()
			if !track(ln) {
				return ctx.Err()
			}
			myAddr = ln.Addr().String()
			if len(myAddr) > maxAddrLen {
				return fmt.Errorf("listen address %q too long", myAddr)
			}
			if testHookListening != nil {
				testHookListening(rank, myAddr)
			}
		}
		tok, addrs, err = helloRoot(c, p, rank, size, myAddr, deadline)
		if err == nil {
			peers[0] = c
			break
		}
		c.Close()
		if !errors.Is(err, errBusy) {
			return &RankError{Rank: 0, Op: "bootstrap", Err: err}
		}
		if !pace.wait(ctx) {
			return fmt.Errorf("the root at %s: %w", rootAddr, err)
		}
	}

	// Accept the lower ranks (other than 0) while dialing the higher ones.
	var wg sync.WaitGroup
	errs := make(chan error, size)
	if rank > 1 {
		acc := startAcceptor(ln, deadline, func(c net.Conn) (arrival, error) {
			r, err := meshHandshake(c, newProver(secret), rank, size, tok)
			return arrival{conn: c, rank: r}, err
		})
		defer acc.stop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for need := rank - 1; need > 0; {
				select {
				case a := <-acc.arrivals:
					acc.take(a)
					if !track(a.conn) {
						return
					}
					if peers[a.rank] != nil {
						a.conn.Close() // a duplicate
						continue
					}
					_ = a.conn.SetDeadline(deadline)
					peers[a.rank] = a.conn
					need--
				case err := <-acc.errc:
					errs <- fmt.Errorf("accepting peers at %s: %w", myAddr, err)
					abort()
					return
				}
			}
		}()
	}
	for j := rank + 1; j < size; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := meshLink(ctx, tr, secret, rank, size, local, addrs[j], tok, track, deadline)
			if err != nil {
				errs <- &RankError{Rank: j, Op: "bootstrap", Err: err}
				abort()
				return
			}
			if c != nil {
				peers[j] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// helloRoot runs a rank's side of the handshake with the root on c: it
// returns the session token and the table of listen addresses, or errBusy
// if the root had no place for c.
func helloRoot(c net.Conn, p *prover, rank, size int, myAddr string, deadline time.Time) (tok token, addrs []string, err error) {
	// The root challenges c once c has a place, which may take a while
	// when every place is held (acceptor.go): the bootstrap's deadline
	// bounds the wait. The table comes once every rank has said hello.
	_ = c.SetDeadline(deadline)
	challenge, err := readChallenge(c)
	if err != nil {
		return tok, nil, err
	}
	mine, err := newNonce()
	if err != nil {
		return tok, nil, err
	}
	if _, err := c.Write(appendHello(nil, p, challenge, rank, size, myAddr, mine)); err != nil {
		return tok, nil, err
	}
	return readTable(c, p, mine, size)
}

// meshLink dials the listener of a higher rank at addr and runs the mesh
// handshake; a listener with no place for it says so (busy), and it dials
// again, within ctx. A nil conn and error: track refused it (ctx ended).
func meshLink(ctx context.Context, tr transport, secret []byte, rank, size int, local, addr string, tok token, track func(io.Closer) bool, deadline time.Time) (net.Conn, error) {
	for pace := (backoff{}); ; {
		// The peer listens already (the root sent the table after every
		// rank said where it listens): a failure is transient, retry for
		// a while; a peer that failed for good makes this rank fail too.
		dctx, cancel := context.WithTimeout(ctx, meshDialPatience)
		c, err := dialRetry(dctx, tr, local, addr)
		cancel()
		if err != nil {
			return nil, err
		}
		if !track(c) {
			return nil, nil
		}
		_ = c.SetDeadline(deadline) // the wait for a place included
		err = meshDial(c, newProver(secret), rank, size, tok)
		if err == nil {
			return c, nil
		}
		c.Close()
		if !errors.Is(err, errBusy) || !pace.wait(ctx) {
			return nil, err
		}
	}
}

// meshHandshake runs the listening side of a mesh link at rank: it returns
// the lower rank that dialed.
func meshHandshake(c net.Conn, p *prover, rank, size int, tok token) (int, error) {
	challenge, err := newNonce()
	if err != nil {
		return 0, err
	}
	if _, err := c.Write(appendChallenge(nil, challenge)); err != nil {
		return 0, err
	}
	r, theirs, err := readMesh(c, p, challenge, size, tok)
	if err != nil {
		return 0, err
	}
	if r <= 0 || r >= rank {
		return 0, fmt.Errorf("mesh hello from rank %d at rank %d", r, rank)
	}
	if _, err := c.Write(appendAck(nil, p, theirs, challenge, tok)); err != nil {
		return 0, err
	}
	return r, nil
}

// meshDial runs the dialing side of a mesh link from rank.
func meshDial(c net.Conn, p *prover, rank, size int, tok token) error {
	challenge, err := readChallenge(c)
	if err != nil {
		return err
	}
	mine, err := newNonce()
	if err != nil {
		return err
	}
	if _, err := c.Write(appendMesh(nil, p, challenge, rank, size, tok, mine)); err != nil {
		return err
	}
	return readAck(c, p, mine, challenge, tok)
}

// testHookListening, when set by a test, learns each rank's listen address
// before the rank says hello to the root.
var testHookListening func(rank int, addr string)

// dialRetry dials until it succeeds or ctx ends: ranks start in any order,
// and the root may not listen yet.
func dialRetry(ctx context.Context, tr transport, local, addr string) (net.Conn, error) {
	for pace := (backoff{}); ; {
		c, err := tr.dial(ctx, local, addr)
		if err == nil {
			return c, nil
		}
		if !pace.wait(ctx) {
			return nil, err
		}
	}
}

// backoff paces the retries of a dial: 10 ms, doubling up to 500 ms.
type backoff struct{ d time.Duration }

// wait waits for the next retry: false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	b.d = min(max(2*b.d, 10*time.Millisecond), 500*time.Millisecond)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func earliest(a, b time.Time) time.Time {
	if !a.IsZero() && a.Before(b) {
		return a
	}
	return b
}
