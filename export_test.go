package rdma

import (
	"net"

	"github.com/rdmanet/rdma/verbs/soft"
)

// SoftCarrier says what carries a soft conn's bytes (a *Conn or an
// *RsocketConn): "shm" or "tcp" (see soft.Carrier); "" on another provider
// or another type.
func SoftCarrier(c net.Conn) string {
	switch c := c.(type) {
	case *Conn:
		return soft.Carrier(c.qp)
	case *RsocketConn:
		return soft.Carrier(c.qp)
	}
	return ""
}
