package collectives

import (
	"net"
	"sync"
	"time"
)

// maxHandshakes bounds the accepted conns of one bootstrap listener that
// are still proving who they are; beyond it a new conn is closed at once.
const maxHandshakes = 256

// arrival is a conn that passed a listener's handshake.
type arrival struct {
	conn  net.Conn
	rank  int
	addr  string // hello: where the rank listens
	nonce nonce  // hello: the rank's nonce, for the table's proof
}

// acceptor accepts conns on a bootstrap listener and runs the handshake of
// each in a goroutine of its own, under a deadline of its own: a silent or
// hostile conn delays nobody. Conns that pass come out of arrivals; the
// others are closed.
type acceptor struct {
	ln        net.Listener
	handshake func(c net.Conn) (arrival, error)
	deadline  time.Time // the bootstrap's, if any

	arrivals chan arrival
	errc     chan error // the Accept error that ended the loop
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]bool // in a handshake, or sent and not yet taken
}

func startAcceptor(ln net.Listener, deadline time.Time, handshake func(net.Conn) (arrival, error)) *acceptor {
	a := &acceptor{
		ln:        ln,
		handshake: handshake,
		deadline:  deadline,
		arrivals:  make(chan arrival),
		errc:      make(chan error, 1),
		done:      make(chan struct{}),
		pending:   map[net.Conn]bool{},
	}
	a.wg.Add(1)
	go a.loop()
	return a
}

func (a *acceptor) loop() {
	defer a.wg.Done()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			a.errc <- err
			return
		}
		a.mu.Lock()
		full := len(a.pending) >= maxHandshakes
		if !full {
			a.pending[c] = true
		}
		a.mu.Unlock()
		if full {
			c.Close()
			continue
		}
		a.wg.Add(1)
		go a.serve(c)
	}
}

func (a *acceptor) serve(c net.Conn) {
	defer a.wg.Done()
	_ = c.SetDeadline(earliest(a.deadline, time.Now().Add(helloTimeout)))
	arr, err := a.handshake(c)
	if err == nil {
		select {
		case a.arrivals <- arr:
			return // the taker owns it, see take

		case <-a.done:
		}
	}
	a.mu.Lock()
	delete(a.pending, c)
	a.mu.Unlock()
	c.Close()
}

// take is called by whoever receives arr from arrivals: the conn is theirs
// now, and stop leaves it alone.
func (a *acceptor) take(arr arrival) {
	a.mu.Lock()
	delete(a.pending, arr.conn)
	a.mu.Unlock()
}

// stop closes the listener and every conn not taken from arrivals, and
// waits for the acceptor's goroutines.
func (a *acceptor) stop() {
	a.ln.Close()
	close(a.done)
	a.mu.Lock()
	for c := range a.pending {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}
