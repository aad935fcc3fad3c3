package collectives

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// A peer's byte stream, whatever it holds, makes an operation succeed or
// fail with an error: never a panic, a hang or an out-of-range access.
func FuzzPeerStream(f *testing.F) {
	valid := func(h header, payload []byte) []byte {
		b := make([]byte, hdrLen+len(payload))
		h.len = uint32(len(payload))
		h.put(b)
		copy(b[hdrLen:], payload)
		return b
	}
	f.Add([]byte{})
	f.Add(valid(header{seq: 1, kind: kindBarrier}, nil))
	f.Add(valid(header{seq: 1, kind: kindAllReduce, arg: typeArg[float64](Sum)}, make([]byte, 16)))
	f.Add(valid(header{kind: kindAbort, root: 1}, []byte("boom")))
	f.Add(valid(header{kind: kindAbort, root: 65535}, make([]byte, 300)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		g, err := NewGroup(0, []net.Conn{nil, a})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		go func() { _, _ = io.Copy(io.Discard, b) }()
		go func() {
			_, _ = b.Write(stream)
			_ = b.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if len(stream) > 0 && stream[0]%2 == 0 {
			_ = g.Barrier(ctx)
		} else {
			v := []float64{1, 2}
			_ = AllReduce(ctx, g, v, v, Sum)
		}
		if ctx.Err() != nil {
			t.Fatal("the operation hung until its context expired")
		}
	})
}

// Bootstrap messages are parsed without panics or unbounded allocation, and
// a message is believed only with a valid proof: a parser that accepts
// input never accepts it under another secret or another challenge.
func FuzzBootstrapMessages(f *testing.F) {
	p, other := newProver([]byte("job secret")), newProver([]byte("another"))
	var challenge, mine nonce
	copy(challenge[:], "challenge-nonce!")
	copy(mine[:], "the-ranks-nonce!")
	var tok token
	copy(tok[:], "session!")
	f.Add(appendChallenge(nil, challenge))
	f.Add(appendHello(nil, p, challenge, 1, 4, "127.0.0.1:1", mine))
	f.Add(appendHello(nil, other, challenge, 1, 4, "127.0.0.1:1", mine))
	f.Add(appendTable(nil, p, mine, tok, []string{"a:1", "b:2", "c:3"}))
	f.Add(appendRefuse(nil, "wrong job secret"))
	f.Add(appendMesh(nil, p, challenge, 2, 4, tok, mine))
	f.Add(appendAck(nil, p, mine, challenge, tok))
	f.Add([]byte("RDCJ\x02"))
	f.Add(appendBusy(nil))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if _, err := readChallenge(bytes.NewReader(msg)); errors.Is(err, errBusy) && !bytes.HasPrefix(msg, appendBusy(nil)) {
			t.Fatalf("busy read from %q", msg)
		}
		if h, err := readHello(bytes.NewReader(msg), p, challenge, 4); err == nil {
			if h.rank < 1 || h.rank >= 4 {
				t.Fatalf("hello accepted rank %d of 4", h.rank)
			}
			if _, err := readHello(bytes.NewReader(msg), other, challenge, 4); err == nil {
				t.Fatal("hello accepted under another secret")
			}
			if _, err := readHello(bytes.NewReader(msg), p, mine, 4); err == nil {
				t.Fatal("hello accepted for another challenge")
			}
		}
		if _, addrs, err := readTable(bytes.NewReader(msg), p, mine, 4); err == nil {
			if len(addrs) != 4 {
				t.Fatalf("table with %d addresses", len(addrs))
			}
			if _, _, err := readTable(bytes.NewReader(msg), other, mine, 4); err == nil {
				t.Fatal("table accepted under another secret")
			}
		}
		if _, _, err := readMesh(bytes.NewReader(msg), p, challenge, 4, tok); err == nil {
			if _, _, err := readMesh(bytes.NewReader(msg), other, challenge, 4, tok); err == nil {
				t.Fatal("mesh hello accepted under another secret")
			}
		}
		if err := readAck(bytes.NewReader(msg), p, mine, challenge, tok); err == nil {
			if err := readAck(bytes.NewReader(msg), other, mine, challenge, tok); err == nil {
				t.Fatal("ack accepted under another secret")
			}
		}
	})
}
