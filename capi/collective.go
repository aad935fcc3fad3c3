package capi

import (
	"errors"
	"fmt"
)

// Broadcast sends data as one message to every connected peer, in index
// order. It fails with ErrNoPeers when there is none. A peer whose
// connection fails is marked gone and the others still get the message; the
// error then names the peers that did not (it matches ErrPeerGone).
func (c *Context) Broadcast(data []byte) error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	live, err := c.peers.livePeers("broadcast", c.live[:0])
	c.live = live
	if err != nil {
		return err
	}
	if len(data) > c.bufSize {
		return fmt.Errorf("capi: broadcast: %w: %d bytes exceed the context's buffer size of %d bytes",
			ErrMessageTooLong, len(data), c.bufSize)
	}
	var failed error
	for _, p := range live {
		if err := p.send(data); err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		return within("broadcast (the other peers got the message)", failed)
	}
	return nil
}

// SequentialAllToAll exchanges one msgSize-byte block per participant: the
// server is participant 0 and its connected clients are 1..n in peer index
// order. Afterwards recv holds every participant's block in participant
// order, (n+1)*msgSize bytes, on every participant. send must hold at least
// msgSize bytes; only the first msgSize are sent.
//
// On a server the exchange runs peer by peer: it receives each client's block
// in turn, then sends the combined blocks to each client, so clients need no
// connections to each other. A client sends its block to its first connected
// peer (the server) and receives the combined blocks; the whole (n+1)*msgSize
// bytes must fit in bufSize on both sides. A client whose connection fails
// during the exchange is gone (see ReconnectPeer, AcceptPeerAt) and left
// out: the others complete the exchange without it.
//
// Nothing is ever written past len(recv), whatever a peer sends. A combined
// message that does not fit in recv fails with ErrMessageTooLong before any
// of it is read, and stays queued (Recv with a big enough buffer gets it).
// On any failure recv holds no partial result: the bytes the call wrote are
// zeroed again.
func (c *Context) SequentialAllToAll(send, recv []byte, msgSize int) error {
	if msgSize <= 0 {
		return fmt.Errorf("capi: all-to-all: %w: message size %d", ErrInvalidArgument, msgSize)
	}
	if len(send) < msgSize {
		return fmt.Errorf("capi: all-to-all: %w: send buffer of %d bytes is shorter than the message size %d",
			ErrInvalidArgument, len(send), msgSize)
	}
	c.collMu.Lock()
	defer c.collMu.Unlock()
	live, err := c.peers.livePeers("all-to-all", c.live[:0])
	c.live = live
	if err != nil {
		return err
	}
	var parts, written int
	if c.isServer {
		parts, written, err = c.allToAllServer(live, send[:msgSize], recv, msgSize)
	} else {
		parts, written, err = c.allToAllClient(live[0], send[:msgSize], recv, msgSize)
	}
	if err != nil {
		clear(recv[:written])
		return err
	}
	c.parts = parts
	return nil
}

// Participants is the number of participants in the last successful
// SequentialAllToAll (0 before any): recv then held that many blocks.
func (c *Context) Participants() int {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	return c.parts
}

// allToAllServer runs the server's side; it returns the number of
// participants and how much of recv it wrote, to be cleared on failure. A
// client whose connection fails is left out (it is gone, see ioError) and
// the others complete the exchange without it.
func (c *Context) allToAllServer(clients []*peer, send, recv []byte, msgSize int) (parts, written int, err error) {
	total := (len(clients) + 1) * msgSize
	if total > c.bufSize {
		return 0, 0, fmt.Errorf("capi: all-to-all: %w: %d participants of %d bytes make %d bytes, more than the buffer size of %d bytes",
			ErrMessageTooLong, len(clients)+1, msgSize, total, c.bufSize)
	}
	if len(recv) < total {
		return 0, 0, fmt.Errorf("capi: all-to-all: %w: receive buffer of %d bytes, need %d", ErrInvalidArgument, len(recv), total)
	}
	copy(recv, send)
	kept := clients[:0] // the scratch list is ours
	for _, p := range clients {
		at := len(kept) + 1
		block := recv[at*msgSize : (at+1)*msgSize]
		if _, err := p.recv(block, exactly(msgSize)); err != nil {
			if errors.Is(err, ErrPeerGone) {
				continue
			}
			return 0, total, within(fmt.Sprintf("all-to-all: participant %d", at), err)
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return 0, total, fmt.Errorf("capi: all-to-all: %w: every client's connection failed", ErrNoPeers)
	}
	total = (len(kept) + 1) * msgSize
	sent := 0
	var failed error
	for i, p := range kept {
		err := p.send(recv[:total])
		switch {
		case err == nil:
			sent++
		case errors.Is(err, ErrPeerGone):
		case failed == nil:
			failed = within(fmt.Sprintf("all-to-all: participant %d", i+1), err)
		}
	}
	if failed != nil {
		return 0, total, failed
	}
	if sent == 0 {
		return 0, total, fmt.Errorf("capi: all-to-all: %w: every client's connection failed", ErrNoPeers)
	}
	return len(kept) + 1, total, nil
}

// allToAllClient runs a client's side: it returns the number of participants
// and how much of recv it wrote, to be cleared on failure.
func (c *Context) allToAllClient(server *peer, send, recv []byte, msgSize int) (parts, written int, err error) {
	if err := server.send(send); err != nil {
		return 0, 0, within("all-to-all", err)
	}
	// The length is vetted before a byte of the message is read: a server
	// cannot make this write past recv, nor leave a partial result in it.
	vetted := 0
	check := func(n int) error {
		if n%msgSize != 0 || n < 2*msgSize {
			return fmt.Errorf("%w: combined message of %d bytes is not 2 or more blocks of %d bytes",
				ErrProtocol, n, msgSize)
		}
		if n > len(recv) {
			return fmt.Errorf("%w: the combined message of %d bytes (%d blocks of %d) does not fit in the receive buffer of %d bytes",
				ErrMessageTooLong, n, n/msgSize, msgSize, len(recv))
		}
		vetted = n
		return nil
	}
	n, err := server.recv(recv, check)
	if err != nil {
		// A read that failed midway may have written up to the vetted
		// length; a refused message wrote nothing.
		return 0, vetted, within("all-to-all", err)
	}
	return n / msgSize, n, nil
}

// exactly accepts only messages of n bytes.
func exactly(n int) func(int) error {
	return func(got int) error {
		if got != n {
			return fmt.Errorf("%w: got a %d-byte message, want a %d-byte all-to-all block", ErrProtocol, got, n)
		}
		return nil
	}
}
