package soft

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// SetEstablishedHook sets a function run as a connecting ID is about to
// report ESTABLISHED, its engine running; nil removes it.
func SetEstablishedHook(f func()) { testHookEstablished = f }

// Silence makes a connected QP stop answering its peer, its transport
// included (a hung host or a partitioned network: liveness.go).
func Silence(q verbs.QP) {
	q.(*qp).silent.Store(true)
	silence(q.(*qp))
}

// RawREQ is a connection request as a client sends it, offering the given
// transports (bit 0 TCP, bit 1 shared memory) with ext as their setup
// data: what a hostile client can put on the wire.
func RawREQ(transports uint32, ext []byte) []byte {
	m := hsMsg{typ: msgREQ, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7, transports: transports, ext: ext}
	b, err := m.marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// RawPeer is a hostile soft client: it completes the handshake on TCP and
// then writes what frames it likes, and reads (or leaves unread) what
// comes back.
type RawPeer struct {
	c  *net.TCPConn
	tr *tcpTransport
}

// RawDial connects to a soft listener at addr as a client asking for 4
// READs in flight.
func RawDial(addr string) (*RawPeer, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTCP("tcp", nil, ta)
	if err != nil {
		return nil, err
	}
	tr, err := newTCPTransport(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	req := hsMsg{typ: msgREQ, qpn: 1, sqDepth: 4, rqDepth: 4, respRes: 4, initDepth: 4, retry: 7, rnrRetry: 7,
		transports: transportTCP}
	b, _ := req.marshal()
	rtu, _ := (&hsMsg{typ: msgRTU}).marshal()
	_ = tr.setReadDeadline(time.Now().Add(10 * time.Second))
	if _, err = c.Write(b); err == nil {
		var m hsMsg
		if m, err = readHandshake(tr); err == nil && m.typ == msgMRA {
			m, err = readHandshake(tr)
		}
		if err == nil && m.typ != msgREP {
			err = fmt.Errorf("answer %d, not a REP", m.typ)
		}
	}
	if err == nil {
		_, err = c.Write(rtu)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = tr.setReadDeadline(time.Time{})
	return &RawPeer{c: c, tr: tr}, nil
}

// Frame writes a frame header (type WRITE, READ_REQ, ...: "write",
// "read") for n payload bytes at (rkey, addr), and the first part of the
// payload.
func (p *RawPeer) Frame(op string, psn uint32, rkey uint32, addr uint64, n uint32, part []byte) error {
	h := header{psn: psn, len: n, rkey: rkey, raddr: addr}
	switch op {
	case "write":
		h.typ = frameWrite
	case "read":
		h.typ = frameReadReq
	default:
		return fmt.Errorf("unknown frame %q", op)
	}
	var hb [hdrLen]byte
	h.encode(&hb)
	_, err := p.tr.writev([][]byte{hb[:], part}, nil, true)
	return err
}

// Payload writes more payload bytes.
func (p *RawPeer) Payload(b []byte) error {
	_, err := p.tr.writev([][]byte{b}, nil, true)
	return err
}

// Drain reads frames until the stream ends, an error, or the deadline.
// It reports how many payload bytes equal to secret arrived and the NAK
// syndromes received ("rem_access", ...).
func (p *RawPeer) Drain(deadline time.Time, secret byte) (secretBytes int, naks []string, err error) {
	_ = p.tr.setReadDeadline(deadline)
	buf := make([]byte, 1<<20)
	for {
		var hb [hdrLen]byte
		if err = p.tr.readHeader(&hb); err != nil {
			return secretBytes, naks, err
		}
		var h header
		if err = h.decode(&hb); err != nil {
			return secretBytes, naks, err
		}
		if h.typ == frameNak {
			naks = append(naks, map[uint32]string{nakRNR: "rnr", nakRemAccess: "rem_access", nakInvReq: "inv_req", nakRemOp: "rem_op"}[h.imm&^0xff])
		}
		for n := h.payloadLen(); n > 0; {
			k := min(n, len(buf))
			if err = p.tr.readPayload(buf[:k], gateRef{}); err != nil {
				return secretBytes, naks, err
			}
			secretBytes += bytes.Count(buf[:k], []byte{secret})
			n -= k
		}
	}
}

// Close ends the connection.
func (p *RawPeer) Close() error { return p.c.Close() }

var ChildConnect = childConnect
var ChildQP = childQP
