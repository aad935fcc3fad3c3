package collectives

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxPending bounds the sends posted on one link and not yet waited for.
const maxPending = 64

type sendReq struct {
	h    header
	data []byte
}

// link is the connection to one peer. Writes belong to the link's sending
// goroutine; reads belong to the goroutine running the current operation.
// Sending from a goroutine of its own is what lets every rank send and
// receive at once: no rank's send waits for its peer's send.
type link struct {
	peer int
	size int // the group's size: bounds the rank a peer's abort frame blames
	conn net.Conn

	sendq   chan sendReq
	done    chan error // one value per processed sendReq; capacity maxPending
	pending int        // posted, not yet taken from done (operation goroutine)

	rhdr     [hdrLen]byte // operation goroutine
	midFrame bool         // operation goroutine: reading a payload

	wbuf []byte // sending goroutine: header, or header and a small payload
	werr error  // sending goroutine: first write error, sticky
}

func newLink(peer, size int, c net.Conn) *link {
	return &link{
		peer:  peer,
		size:  size,
		conn:  c,
		sendq: make(chan sendReq, maxPending),
		done:  make(chan error, maxPending),
		wbuf:  make([]byte, hdrLen+coalesceMax),
	}
}

// sendLoop writes the posted messages in order until quit is closed. It
// never blocks on done: at most maxPending requests are unacknowledged.
// When the group fails it tells the peer, with an abort frame written at a
// frame boundary, and closes the conn.
func (l *link) sendLoop(g *Group) {
	defer g.wg.Done()
	abortc := g.abortc
	for {
		select {
		case req := <-l.sendq:
			// After a failure the buffers belong to the caller again as soon as
			// the operation returns: do not start writing them.
			if l.werr == nil && g.failed.Load() {
				l.werr = ErrBroken
			}
			if l.werr == nil {
				if err := l.writeMsg(&req, g); err != nil {
					l.werr = &RankError{Rank: l.peer, Op: "send", Err: err}
				}
			}
			l.done <- l.werr
		case <-abortc:
			abortc = nil
			l.writeAbort(g.abortMsg)
			// Half-close where possible: a full close with our receive
			// buffer holding unread data resets the connection, and the
			// peer's failing sends would hide the abort frame.
			if cw, ok := l.conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			} else {
				_ = l.conn.Close()
			}
		case <-g.quit:
			return
		}
	}
}

// writeAbort sends the failure notice; the write deadline set by fail
// bounds it when the peer does not read.
func (l *link) writeAbort(msg []byte) {
	_, _ = l.conn.Write(msg)
}

func (l *link) writeMsg(req *sendReq, g *Group) error {
	h := req.h
	data := req.data
	for {
		if g.failed.Load() {
			return ErrBroken
		}
		n := min(len(data), frameMax)
		h.len = uint32(n)
		h.put(l.wbuf)
		if n <= coalesceMax {
			copy(l.wbuf[hdrLen:], data[:n])
			if _, err := l.conn.Write(l.wbuf[:hdrLen+n]); err != nil {
				return err
			}
		} else {
			if _, err := l.conn.Write(l.wbuf[:hdrLen]); err != nil {
				return err
			}
			if _, err := l.conn.Write(data[:n]); err != nil {
				return err
			}
		}
		data = data[n:]
		if len(data) == 0 {
			return nil
		}
	}
}

// readHeader reads one frame header and checks it is the expected one.
func (l *link) readHeader(want *header) error {
	if _, err := io.ReadFull(l.conn, l.rhdr[:]); err != nil {
		return &RankError{Rank: l.peer, Op: "receive", Err: err}
	}
	var got header
	got.get(l.rhdr[:])
	if got.kind == kindAbort {
		return l.readAbort(&got)
	}
	if got != *want {
		return &RankError{Rank: l.peer, Op: "frame", Err: &mismatchError{got: got, want: *want}}
	}
	return nil
}

// readPayload fills b from the conn.
func (l *link) readPayload(b []byte) error {
	l.midFrame = true
	defer func() { l.midFrame = false }()
	if _, err := io.ReadFull(l.conn, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return &RankError{Rank: l.peer, Op: "receive", Err: err}
	}
	return nil
}

// readAbort turns a peer's abort frame into the error it reports: the rank
// the peer blames, and why. It always returns an error: Op "failed" for a
// well-formed frame, else an error blaming the peer itself (a malformed
// frame, or a blamed rank outside the group, is the sender's fault).
func (l *link) readAbort(h *header) error {
	blamed := int(h.root)
	if h.len > abortTextMax {
		return &RankError{Rank: l.peer, Op: "frame", Err: fmt.Errorf("abort frame with %d bytes of text", h.len)}
	}
	if blamed >= l.size {
		return &RankError{Rank: l.peer, Op: "frame", Err: fmt.Errorf("abort frame blames rank %d of a group of %d", blamed, l.size)}
	}
	var text [abortTextMax]byte
	if err := l.readPayload(text[:h.len]); err != nil {
		return err
	}
	return &RankError{Rank: blamed, Op: "failed", Err: fmt.Errorf("reported by rank %d: %s", l.peer, text[:h.len])}
}

// explainWait bounds the search for a peer's abort frame after a send to it
// failed.
const explainWait = 200 * time.Millisecond

// explain replaces the error of a failed send by the reason the peer gave,
// when the peer failed first and said why in an abort frame still waiting
// to be read: the blame then goes to the rank that caused the failure, not to
// the messenger.
func (l *link) explain(err error) error {
	if l.midFrame {
		return err
	}
	_ = l.conn.SetReadDeadline(time.Now().Add(explainWait))
	for i := 0; i < 2*maxPending; i++ {
		if _, e := io.ReadFull(l.conn, l.rhdr[:]); e != nil {
			return err
		}
		var h header
		h.get(l.rhdr[:])
		if h.kind == kindAbort {
			ab := l.readAbort(&h)
			var re *RankError
			if errors.As(ab, &re) && re.Op == "failed" {
				return ab
			}
			return err
		}
		if h.len > frameMax {
			return err
		}
		if _, e := io.CopyN(io.Discard, l.conn, int64(h.len)); e != nil {
			return err
		}
	}
	return err
}
