package soft

import "github.com/rdmanet/rdma/verbs"

// Silence makes a connected QP stop answering its peer (a hung host).
func Silence(q verbs.QP) { q.(*qp).silent.Store(true) }

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
