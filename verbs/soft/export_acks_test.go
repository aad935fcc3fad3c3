package soft

import "github.com/rdmanet/rdma/verbs"

// DelayedAcks reports whether a connected QP's two sides agreed to
// delayed ACKs in the handshake.
func DelayedAcks(q verbs.QP) bool {
	p := q.(*qp)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delayedAcks
}
