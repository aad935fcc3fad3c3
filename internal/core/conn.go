package core

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/rdmanet/rdma/internal/cmwatch"
	"github.com/rdmanet/rdma/internal/connstats"
)

// Conn is the state a connection of either wire shares with the other,
// as poll.FD is a net.Conn's: the serialisation of Reads and of Writes,
// the connection's lock, Close's flag and channel, the connection's
// failure, the deadlines, the wake-ups of waiting Reads and Writes, the
// poll role's state and the counters. Mu is the connection's lock: each wire's own state is
// guarded by it too. The wire's face (the root package's connFace) holds
// it as a named field, so that none of it shows in the public types.
type Conn struct {
	ReadMu  sync.Mutex // serialises Read
	WriteMu sync.Mutex // serialises Write, CloseWrite and Close's drain

	Mu       sync.Mutex
	Closed   bool
	Torn     bool          // verbs objects destroyed
	Err      error         // why the connection failed; nil while healthy
	RcvReady chan struct{} // poked when the receive side changed
	SndReady chan struct{} // poked when send resources were freed
	ClosedCh chan struct{} // closed by Close

	ReadDL, WriteDL Deadline

	// Poll is the poll role's state (Poller is its work).
	Poll PollState

	Counters *connstats.Counters // apart from the connection (one allocation with it), so that it keeps to its size class

	// The conversation, which decides whether a wait spins where the
	// completion channel does the spinning (soft's; poller.go): talked
	// counts the messages sent that the peer answers or acts on (data, a
	// rendezvous' descriptor and done), and heard is what talked was when
	// the peer's last such message arrived. Under Mu.
	talked, heard uint32

	// The watch (internal/cmwatch), stopped by Close.
	Watch cmwatch.Watch

	// Local and Remote are the addresses the connection's *net.OpErrors
	// name (nil until it is established).
	Local, Remote net.Addr

	// LookAgain is the wire's poller's: a deadline set while the poll
	// role's holder sleeps on the completion channel wakes it to look.
	LookAgain func()
}

// Init readies the state of a connection whose poll role is r.
func (c *Conn) Init(r Poller) {
	c.LookAgain = r.LookAgain
	c.RcvReady = make(chan struct{}, 1)
	c.SndReady = make(chan struct{}, 1)
	c.ClosedCh = make(chan struct{})
	c.ReadDL, c.WriteDL = MakeDeadline(), MakeDeadline()
	c.Counters = new(connstats.Counters)
}

// TalkedLocked notes a message sent that the peer answers or acts on.
func (c *Conn) TalkedLocked() { c.talked++ }

// HeardLocked notes a message from the peer of that kind.
func (c *Conn) HeardLocked() { c.heard = c.talked }

// AnswerDueLocked reports whether the connection has sent such a message
// since it last heard one: a wait now is likely a wait for the answer.
func (c *Conn) AnswerDueLocked() bool { return c.talked != c.heard }

// Network is the root package's Network, which the connection's
// *net.OpErrors name.
const Network = "rdma"

// OpErr is err as the *net.OpError of the connection's operation op.
func (c *Conn) OpErr(op string, err error) error {
	return &net.OpError{Op: op, Net: Network, Source: c.Local, Addr: c.Remote, Err: err}
}

// MarkClosed is Close's first step: it fails with net.ErrClosed on a
// closed connection, else marks it closed and wakes what waits on
// ClosedCh.
func (c *Conn) MarkClosed() error {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if c.Closed {
		return c.OpErr("close", net.ErrClosed)
	}
	c.Closed = true
	close(c.ClosedCh)
	return nil
}

// CheckOpen fails op with net.ErrClosed once the connection is closed.
func (c *Conn) CheckOpen(op string) error {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if c.Closed {
		return c.OpErr(op, net.ErrClosed)
	}
	return nil
}

// SetDeadlines moves a (and b, unless nil) to t, for op (a SetDeadline of
// the face), and has a sleeping poll role holder look at them if that
// brought one sooner.
func (c *Conn) SetDeadlines(op string, t time.Time, a, b *Deadline) error {
	if err := c.CheckOpen(op); err != nil {
		return err
	}
	sooner := a.Set(t)
	if b != nil && b.Set(t) {
		sooner = true
	}
	if sooner {
		// Only a deadline that comes sooner wakes the poll role's holder:
		// go-redis and raft move both deadlines later before every
		// request, and net/http clears them, and each wake-up of a
		// holder asleep on the channel costs a wake-up and a sleep.
		c.LookAgain()
	}
	return nil
}

// StopErrLocked says why a Read (dl: ReadDL) or a Write (WriteDL) cannot
// go on whatever the wire's state: Close, or the deadline passed.
func (c *Conn) StopErrLocked(dl *Deadline) error {
	switch {
	case c.Closed:
		return net.ErrClosed
	case dl.Passed():
		return os.ErrDeadlineExceeded
	}
	return nil
}

// ReadStopLocked is a Read's look before each step, for either wire,
// with Mu held (it stays held): the error that ends the Read once Close
// or the deadline has, else nil.
func (c *Conn) ReadStopLocked() error {
	if e := c.StopErrLocked(&c.ReadDL); e != nil {
		return c.OpErr("read", e)
	}
	return nil
}

// WriteOverLocked is a Write's look before each step, for either wire,
// with Mu held (it stays held): whether the Write is over, and its error.
// wireErr is why the wire says the Write cannot go on (its
// writeErrLocked); else it is over once it posted all of b (n bytes). A
// Write that posted all of a non-empty b is over whatever happened to the
// connection since, and does not look.
func (c *Conn) WriteOverLocked(wireErr error, sent, n int) (bool, error) {
	if wireErr != nil {
		return true, c.OpErr("write", wireErr)
	}
	return sent == n, nil
}

// WaitStart is what Await notes as a wait begins: the clock, for a
// Write's (whose total wait is counted; a Read's wait is the peer's
// business and is not timed).
func (c *Conn) WaitStart(dl *Deadline) time.Time {
	if dl == &c.WriteDL {
		return time.Now()
	}
	return time.Time{}
}

// WaitedLocked counts a wait that began at began and ended how, with Mu
// held.
func (c *Conn) WaitedLocked(dl *Deadline, began time.Time, how connstats.WaitKind) {
	switch dl {
	case &c.WriteDL:
		c.Counters.WriteWait += time.Since(began)
	case &c.ReadDL:
		c.Counters.ReadWaits++
		c.Counters.ReadWait = max(c.Counters.ReadWait, how)
	}
}

// Poke wakes a waiter on ch, if none was woken already.
func Poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
