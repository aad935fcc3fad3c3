package collectives

import (
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// The bootstrap protocol (version 2), on conns made by a transport's dial
// and listen. Every exchange starts with a challenge from the side that
// accepted the conn, so that each side proves it knows the job secret by an
// HMAC-SHA256 over the other side's fresh nonce; the secret itself never
// crosses the wire.
//
//	root -> rank r>0    challenge {hdr, nonceA}
//	rank r -> root      hello     {hdr, rank, size, addr, nonceB, mac("hello", nonceA, body)}
//	root -> rank r      table     {hdr, size, token, addr[1..size-1], mac("table", nonceB, body)}
//	                 or refuse    {hdr, reason}                      (then the root closes)
//	rank j -> rank i    challenge {hdr, nonceA}                      for 0 < i < j: i dials j
//	rank i -> rank j    mesh      {hdr, rank i, size, token, nonceB, mac("mesh", nonceA, body)}
//	rank j -> rank i    ack       {hdr, mac("ack", nonceB, nonceA, token)}
//	listener -> dialer  busy      {hdr}                              (then it closes)
//
// A listener with no place for a conn's handshake (acceptor.go) sends busy
// instead of a challenge, or in place of what follows the dialer's hello;
// the dialer then dials again (a rank of an earlier release, which does
// not know busy, fails as it did on the close that came instead).
// hdr is {magic "RDCJ", version, type}; integers are little-endian uint32;
// addr is where the rank listens for its lower-ranked peers, one length byte
// then the text; body is the message from its first byte to the mac. The
// conns to the root double as the group's links to rank 0. token names the
// session, so that a stale connection from an earlier job with the same
// secret is dropped as well.
const (
	bootMagic    = "RDCJ"
	bootVersion  = 2
	msgHello     = 1
	msgTable     = 2
	msgMesh      = 3
	msgChallenge = 4
	msgAck       = 5
	msgRefuse    = 6
	msgBusy      = 7

	bootHdrLen = 6
	nonceLen   = 16
	macLen     = sha256.Size
	tokenLen   = 8
	maxAddrLen = 255
	maxReason  = 255
)

type (
	nonce [nonceLen]byte
	token [tokenLen]byte
)

// errWrongSecret is what a side learns when the other side's proof fails.
var errWrongSecret = errors.New("wrong job secret: the ranks of a job must share RDMA_JOB_SECRET (or Bootstrap.Secret)")

// errRefused wraps the reason the root gave for refusing a rank.
var errRefused = errors.New("the root refused this rank")

// errBusy is what a dialer learns when the listener had no place for its
// handshake: it dials again.
var errBusy = errors.New("the listener is busy with other handshakes")

func newNonce() (n nonce, err error) {
	_, err = crand.Read(n[:])
	return n, err
}

// prover computes the MACs of one side of a bootstrap; the zero key (no
// secret) still runs the protocol, and then proves only that both sides
// have none.
type prover struct{ h hash.Hash }

func newProver(secret []byte) *prover { return &prover{h: hmac.New(sha256.New, secret)} }

func (p *prover) mac(label string, parts ...[]byte) [macLen]byte {
	p.h.Reset()
	p.h.Write([]byte(label))
	for _, b := range parts {
		p.h.Write(b)
	}
	var m [macLen]byte
	p.h.Sum(m[:0])
	return m
}

func (p *prover) check(got []byte, label string, parts ...[]byte) error {
	want := p.mac(label, parts...)
	if !hmac.Equal(got, want[:]) {
		return errWrongSecret
	}
	return nil
}

func appendHeader(b []byte, typ byte) []byte {
	b = append(b, bootMagic...)
	return append(b, bootVersion, typ)
}

// readHeaderBoot reads a message header and returns its type, which is want
// or, where refusable, msgRefuse. A busy notice, which may come instead of
// any message a dialer reads, is errBusy.
func readHeaderBoot(r io.Reader, want byte, refusable bool) (byte, error) {
	var h [bootHdrLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	if string(h[:4]) != bootMagic {
		return 0, errors.New("not a collectives bootstrap message")
	}
	if h[4] != bootVersion {
		return 0, fmt.Errorf("bootstrap protocol version %d, want %d", h[4], bootVersion)
	}
	if h[5] == msgBusy && want != msgHello && want != msgMesh {
		return 0, errBusy
	}
	if h[5] != want && !(refusable && h[5] == msgRefuse) {
		return 0, fmt.Errorf("bootstrap message type %d, want %d", h[5], want)
	}
	return h[5], nil
}

// readBytes reads one length byte and that many bytes.
func readBytes(r io.Reader) ([]byte, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, n[0])
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func appendBytes(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

// --- busy --------------------------------------------------------------

func appendBusy(b []byte) []byte { return appendHeader(b, msgBusy) }

// --- challenge ---------------------------------------------------------

func appendChallenge(b []byte, n nonce) []byte {
	return append(appendHeader(b, msgChallenge), n[:]...)
}

func readChallenge(r io.Reader) (n nonce, err error) {
	if _, err := readHeaderBoot(r, msgChallenge, false); err != nil {
		return n, err
	}
	_, err = io.ReadFull(r, n[:])
	return n, err
}

// --- hello -------------------------------------------------------------

func appendHello(b []byte, p *prover, challenge nonce, rank, size int, addr string, mine nonce) []byte {
	start := len(b)
	b = appendHeader(b, msgHello)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = appendBytes(b, addr)
	b = append(b, mine[:]...)
	m := p.mac("hello", challenge[:], b[start:])
	return append(b, m[:]...)
}

type hello struct {
	rank  int
	addr  string
	nonce nonce
}

// readHello reads a rank's hello to a root of size ranks that challenged it
// with challenge. The proof is checked before anything else is believed.
func readHello(r io.Reader, p *prover, challenge nonce, size int) (h hello, err error) {
	body := make([]byte, 0, bootHdrLen+8+1+maxAddrLen+nonceLen)
	if _, err := readHeaderBoot(r, msgHello, false); err != nil {
		return h, err
	}
	body = appendHeader(body, msgHello)
	var fixed [8]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return h, err
	}
	body = append(body, fixed[:]...)
	addr, err := readBytes(r)
	if err != nil {
		return h, err
	}
	body = append(append(body, byte(len(addr))), addr...)
	if _, err := io.ReadFull(r, h.nonce[:]); err != nil {
		return h, err
	}
	body = append(body, h.nonce[:]...)
	var mac [macLen]byte
	if _, err := io.ReadFull(r, mac[:]); err != nil {
		return h, err
	}
	if err := p.check(mac[:], "hello", challenge[:], body); err != nil {
		return h, err
	}
	h.rank = int(binary.LittleEndian.Uint32(fixed[0:]))
	if s := int(binary.LittleEndian.Uint32(fixed[4:])); s != size {
		return h, fmt.Errorf("rank %d was started with size %d, the root with %d", h.rank, s, size)
	}
	if h.rank < 1 || h.rank >= size {
		return h, fmt.Errorf("hello from rank %d of %d", h.rank, size)
	}
	h.addr = string(addr)
	return h, nil
}

// --- table or refuse -----------------------------------------------------

func appendTable(b []byte, p *prover, rankNonce nonce, tok token, addrs []string) []byte {
	start := len(b)
	b = appendHeader(b, msgTable)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(addrs)+1))
	b = append(b, tok[:]...)
	for _, a := range addrs {
		b = appendBytes(b, a)
	}
	m := p.mac("table", rankNonce[:], b[start:])
	return append(b, m[:]...)
}

func appendRefuse(b []byte, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	return appendBytes(appendHeader(b, msgRefuse), reason)
}

// readTable reads the root's answer to a hello that carried mine: the
// session token and the listen addresses of ranks 1..size-1 (addrs[0] is
// ""), or the root's refusal as an error matching errRefused.
func readTable(r io.Reader, p *prover, mine nonce, size int) (tok token, addrs []string, err error) {
	typ, err := readHeaderBoot(r, msgTable, true)
	if err != nil {
		return tok, nil, err
	}
	if typ == msgRefuse {
		reason, err := readBytes(r)
		if err != nil {
			return tok, nil, fmt.Errorf("%w: %w", errRefused, err)
		}
		return tok, nil, fmt.Errorf("%w: %q", errRefused, reason)
	}
	var fixed [4 + tokenLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return tok, nil, err
	}
	if s := int(binary.LittleEndian.Uint32(fixed[:4])); s != size {
		return tok, nil, fmt.Errorf("the root has size %d, this rank %d", s, size)
	}
	body := appendHeader(make([]byte, 0, bootHdrLen+len(fixed)+size*16), msgTable)
	body = append(body, fixed[:]...)
	addrs = make([]string, size)
	for i := 1; i < size; i++ {
		a, err := readBytes(r)
		if err != nil {
			return tok, nil, err
		}
		body = append(append(body, byte(len(a))), a...)
		addrs[i] = string(a)
	}
	var mac [macLen]byte
	if _, err := io.ReadFull(r, mac[:]); err != nil {
		return tok, nil, err
	}
	if err := p.check(mac[:], "table", mine[:], body); err != nil {
		return tok, nil, fmt.Errorf("the table from the root: %w", err)
	}
	copy(tok[:], fixed[4:])
	return tok, addrs, nil
}

// --- mesh and ack --------------------------------------------------------

const meshLen = bootHdrLen + 8 + tokenLen + nonceLen

func appendMesh(b []byte, p *prover, challenge nonce, rank, size int, tok token, mine nonce) []byte {
	start := len(b)
	b = appendHeader(b, msgMesh)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = append(b, tok[:]...)
	b = append(b, mine[:]...)
	m := p.mac("mesh", challenge[:], b[start:])
	return append(b, m[:]...)
}

// readMesh reads a lower rank's mesh hello to a listener that challenged it
// with challenge, in session tok of size ranks; it returns the dialer's rank
// and nonce.
func readMesh(r io.Reader, p *prover, challenge nonce, size int, tok token) (rank int, theirs nonce, err error) {
	var b [meshLen + macLen]byte
	if _, err := readHeaderBoot(r, msgMesh, false); err != nil {
		return 0, theirs, err
	}
	if _, err := io.ReadFull(r, b[bootHdrLen:]); err != nil {
		return 0, theirs, err
	}
	appendHeader(b[:0], msgMesh)
	if err := p.check(b[meshLen:], "mesh", challenge[:], b[:meshLen]); err != nil {
		return 0, theirs, err
	}
	f := b[bootHdrLen:]
	if int(binary.LittleEndian.Uint32(f[4:])) != size || token(f[8:8+tokenLen]) != tok {
		return 0, theirs, errors.New("mesh hello from another session")
	}
	copy(theirs[:], f[8+tokenLen:])
	return int(binary.LittleEndian.Uint32(f[0:])), theirs, nil
}

func appendAck(b []byte, p *prover, dialerNonce, challenge nonce, tok token) []byte {
	m := p.mac("ack", dialerNonce[:], challenge[:], tok[:])
	return append(appendHeader(b, msgAck), m[:]...)
}

// readAck reads the listener's proof that it too holds the secret and is in
// session tok.
func readAck(r io.Reader, p *prover, mine, challenge nonce, tok token) error {
	if _, err := readHeaderBoot(r, msgAck, false); err != nil {
		return err
	}
	var mac [macLen]byte
	if _, err := io.ReadFull(r, mac[:]); err != nil {
		return err
	}
	return p.check(mac[:], "ack", mine[:], challenge[:], tok[:])
}
