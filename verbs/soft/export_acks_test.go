package soft

import (
	"fmt"
	"net"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// DelayedAcks reports whether a connected QP's two sides agreed to
// delayed ACKs in the handshake.
func DelayedAcks(q verbs.QP) bool {
	p := q.(*qp)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delayedAcks
}

// OldREPDelayedAcks connects to a soft listener at addr as a client of an
// earlier version would (its REQ without hsDelayedAcks), and reports
// whether the REP's transports word carried the flag, which such a client
// would reject. It completes the handshake with an RTU and hangs up.
func OldREPDelayedAcks(addr string) (bool, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return false, err
	}
	c, err := net.DialTCP("tcp", nil, ta)
	if err != nil {
		return false, err
	}
	defer c.Close()
	tr, err := newTCPTransport(c)
	if err != nil {
		return false, err
	}
	req := hsMsg{typ: msgREQ, qpn: 1, sqDepth: 4, rqDepth: 4, retry: 7, rnrRetry: 7, transports: transportTCP}
	b, _ := req.marshal()
	rtu, _ := (&hsMsg{typ: msgRTU}).marshal()
	_ = tr.setReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		return false, err
	}
	m, err := readHandshake(tr)
	if err == nil && m.typ == msgMRA {
		m, err = readHandshake(tr)
	}
	if err != nil {
		return false, err
	}
	if m.typ != msgREP {
		return false, fmt.Errorf("answer %d, not a REP", m.typ)
	}
	_, err = c.Write(rtu)
	return m.delayedAcks, err
}
