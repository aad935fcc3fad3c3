package soft

import "github.com/rdmanet/rdma/verbs"

// Carrier reports what carries the frames of q, a connected QP of this
// provider: "tcp", or "shm" for the same-host shared-memory path (see
// shm.go). It is "" when q is not this provider's or not connected. It lets
// a program (or a test) see which path the handshake chose.
func Carrier(q verbs.QP) string {
	sq, ok := q.(*qp)
	if !ok {
		return ""
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if c, ok := sq.tr.(interface{ carrier() string }); ok {
		return c.carrier()
	}
	return ""
}

func (*tcpTransport) carrier() string { return "tcp" }
