package collectives

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The bootstrap protocol, on conns made by a transport's dial and listen:
//
//	rank r>0 -> root   hello  {magic, version, msgHello, rank, size, addr}
//	root -> rank r>0   table  {magic, version, msgTable, size, token, addr[1..size-1]}
//	rank i -> rank j   mesh   {magic, version, msgMesh, rank i, size, token}   for 0 < i < j
//
// addr is where the rank listens for its lower-ranked peers; the conns to
// the root double as the group's links to rank 0. token identifies the
// session, so that a stray or stale connection to a listener is dropped.
const (
	bootMagic   = "RDCJ"
	bootVersion = 1
	msgHello    = 1
	msgTable    = 2
	msgMesh     = 3
	maxAddrLen  = 255
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
func join(ctx context.Context, tr transport, rank, size int, rootAddr, local string) (g *Group, err error) {
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
		if err := rootJoin(ctx, tr, size, rootAddr, peers, track, deadline); err != nil {
			return nil, err
		}
	} else if err := memberJoin(ctx, tr, rank, size, rootAddr, local, peers, track, closeAll, deadline); err != nil {
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
	return g, nil
}

func rootJoin(ctx context.Context, tr transport, size int, rootAddr string, peers []net.Conn, track func(io.Closer) bool, deadline time.Time) error {
	ln, err := tr.listen(ctx, rootAddr)
	if err != nil {
		return err
	}
	if !track(ln) {
		ln.Close()
		return ctx.Err()
	}
	type arrival struct {
		conn net.Conn
		rank int
		addr string
	}
	arrivals := make(chan arrival)
	done := make(chan struct{})
	var wg sync.WaitGroup
	// Accepted conns not (yet) known to be ranks: closed when the root is
	// done, which also ends their readers.
	var strayMu sync.Mutex
	strays := map[net.Conn]bool{}
	defer func() {
		ln.Close()
		close(done)
		strayMu.Lock()
		for c := range strays {
			c.Close()
		}
		strayMu.Unlock()
		wg.Wait()
	}()
	acceptErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			strayMu.Lock()
			strays[c] = true
			strayMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetDeadline(earliest(deadline, time.Now().Add(helloTimeout)))
				r, addr, err := readHello(c, size)
				if err != nil {
					c.Close() // not one of ours: drop it
					return
				}
				select {
				case arrivals <- arrival{c, r, addr}:
				case <-done:
					c.Close()
				}
			}()
		}
	}()
	addrs := make([]string, size)
	for got := 0; got < size-1; {
		select {
		case a := <-arrivals:
			strayMu.Lock()
			delete(strays, a.conn)
			strayMu.Unlock()
			if !track(a.conn) {
				return ctx.Err()
			}
			_ = a.conn.SetDeadline(deadline)
			if peers[a.rank] != nil {
				return fmt.Errorf("two processes say they are rank %d (from %v and %v)", a.rank, peers[a.rank].RemoteAddr(), a.conn.RemoteAddr())
			}
			peers[a.rank], addrs[a.rank] = a.conn, a.addr
			got++
		case err := <-acceptErr:
			return fmt.Errorf("accepting at %s: %w", rootAddr, err)
		}
	}
	var token [8]byte
	if _, err := crand.Read(token[:]); err != nil {
		return err
	}
	table := appendHeader(nil, msgTable)
	table = binary.LittleEndian.AppendUint32(table, uint32(size))
	table = append(table, token[:]...)
	for _, a := range addrs[1:] {
		table = append(table, byte(len(a)))
		table = append(table, a...)
	}
	for r := 1; r < size; r++ {
		if _, err := peers[r].Write(table); err != nil {
			return &RankError{Rank: r, Op: "bootstrap", Err: err}
		}
	}
	return nil
}

func memberJoin(ctx context.Context, tr transport, rank, size int, rootAddr, local string, peers []net.Conn, track func(io.Closer) bool, abort func(), deadline time.Time) error {
	c0, err := dialRetry(ctx, tr, local, rootAddr)
	if err != nil {
		return fmt.Errorf("dialing the root at %s: %w", rootAddr, err)
	}
	if !track(c0) {
		return ctx.Err()
	}
	peers[0] = c0
	_ = c0.SetDeadline(deadline)
	if local == "" {
		host, _, err := net.SplitHostPort(c0.LocalAddr().String())
		if err != nil {
			return fmt.Errorf("local address %v: %w", c0.LocalAddr(), err)
		}
		local = host
	}
	ln, err := tr.listen(ctx, net.JoinHostPort(local, "0"))
	if err != nil {
		return err
	}
	defer ln.Close()
	if !track(ln) {
		return ctx.Err()
	}
	myAddr := ln.Addr().String()
	if len(myAddr) > maxAddrLen {
		return fmt.Errorf("listen address %q too long", myAddr)
	}
	hello := appendHeader(nil, msgHello)
	hello = binary.LittleEndian.AppendUint32(hello, uint32(rank))
	hello = binary.LittleEndian.AppendUint32(hello, uint32(size))
	hello = append(hello, byte(len(myAddr)))
	hello = append(hello, myAddr...)
	if _, err := c0.Write(hello); err != nil {
		return &RankError{Rank: 0, Op: "bootstrap", Err: err}
	}
	token, addrs, err := readTable(c0, size)
	if err != nil {
		return &RankError{Rank: 0, Op: "bootstrap", Err: err}
	}

	// Accept the lower ranks (other than 0) while dialing the higher ones.
	var wg sync.WaitGroup
	errs := make(chan error, size)
	if rank > 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for need := rank - 1; need > 0; {
				c, err := ln.Accept()
				if err != nil {
					errs <- fmt.Errorf("accepting peers at %s: %w", myAddr, err)
					abort()
					return
				}
				if !track(c) {
					return
				}
				_ = c.SetDeadline(earliest(deadline, time.Now().Add(helloTimeout)))
				r, err := readMesh(c, size, token)
				if err != nil || r <= 0 || r >= rank || peers[r] != nil {
					c.Close() // stray, stale or duplicate
					continue
				}
				_ = c.SetDeadline(deadline)
				peers[r] = c
				need--
			}
		}()
	}
	for j := rank + 1; j < size; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The peer listens already (the root sent the table after every
			// rank said where it listens): a failure is transient, retry for
			// a while; a peer that failed for good makes this rank fail too.
			dctx, cancel := context.WithTimeout(ctx, meshDialPatience)
			c, err := dialRetry(dctx, tr, local, addrs[j])
			cancel()
			if err != nil {
				errs <- &RankError{Rank: j, Op: "bootstrap", Err: err}
				abort()
				return
			}
			if !track(c) {
				return
			}
			_ = c.SetDeadline(deadline)
			msg := appendHeader(nil, msgMesh)
			msg = binary.LittleEndian.AppendUint32(msg, uint32(rank))
			msg = binary.LittleEndian.AppendUint32(msg, uint32(size))
			msg = append(msg, token[:]...)
			if _, err := c.Write(msg); err != nil {
				errs <- &RankError{Rank: j, Op: "bootstrap", Err: err}
				abort()
				return
			}
			peers[j] = c
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

// dialRetry dials until it succeeds or ctx ends: ranks start in any order,
// and the root may not listen yet.
func dialRetry(ctx context.Context, tr transport, local, addr string) (net.Conn, error) {
	wait := 10 * time.Millisecond
	for {
		c, err := tr.dial(ctx, local, addr)
		if err == nil {
			return c, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func earliest(a, b time.Time) time.Time {
	if !a.IsZero() && a.Before(b) {
		return a
	}
	return b
}

func appendHeader(b []byte, typ byte) []byte {
	b = append(b, bootMagic...)
	return append(b, bootVersion, typ)
}

func readHeaderBoot(r io.Reader, typ byte) error {
	var h [6]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	if string(h[:4]) != bootMagic {
		return errors.New("not a collectives bootstrap message")
	}
	if h[4] != bootVersion {
		return fmt.Errorf("bootstrap protocol version %d, want %d", h[4], bootVersion)
	}
	if h[5] != typ {
		return fmt.Errorf("bootstrap message type %d, want %d", h[5], typ)
	}
	return nil
}

func readString(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, n[0])
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

func readHello(r io.Reader, size int) (rank int, addr string, err error) {
	if err := readHeaderBoot(r, msgHello); err != nil {
		return 0, "", err
	}
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, "", err
	}
	rank = int(binary.LittleEndian.Uint32(b[0:]))
	if s := int(binary.LittleEndian.Uint32(b[4:])); s != size {
		return 0, "", fmt.Errorf("rank %d was started with size %d, the root with %d", rank, s, size)
	}
	if rank < 1 || rank >= size {
		return 0, "", fmt.Errorf("hello from rank %d of %d", rank, size)
	}
	addr, err = readString(r)
	return rank, addr, err
}

func readTable(r io.Reader, size int) (token [8]byte, addrs []string, err error) {
	if err := readHeaderBoot(r, msgTable); err != nil {
		return token, nil, err
	}
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return token, nil, err
	}
	if s := int(binary.LittleEndian.Uint32(b[:])); s != size {
		return token, nil, fmt.Errorf("the root has size %d, this rank %d", s, size)
	}
	if _, err := io.ReadFull(r, token[:]); err != nil {
		return token, nil, err
	}
	addrs = make([]string, size)
	for i := 1; i < size; i++ {
		if addrs[i], err = readString(r); err != nil {
			return token, nil, err
		}
	}
	return token, addrs, nil
}

func readMesh(r io.Reader, size int, token [8]byte) (int, error) {
	if err := readHeaderBoot(r, msgMesh); err != nil {
		return 0, err
	}
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	if int(binary.LittleEndian.Uint32(b[4:])) != size || [8]byte(b[8:16]) != token {
		return 0, errors.New("mesh hello from another session")
	}
	return int(binary.LittleEndian.Uint32(b[0:])), nil
}
