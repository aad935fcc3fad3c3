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
		return soft.Carrier(c.c.EP.QP)
	case *RsocketConn:
		return soft.Carrier(c.c.QP())
	}
	return ""
}

// settled reports whether c's bytes go where they will stay: not soft's
// TCP path, from which a connection that talks moves to shared memory in
// the background (its rings are made then), and any other provider's.
func settled(c net.Conn) bool { return SoftCarrier(c) != "tcp" }

// SetNoWindows makes rendezvous Writes register what they expose (true),
// as on a device without memory windows; it returns the previous setting.
func SetNoWindows(on bool) bool { return setNoWindows(on) }

// setNoWindows sets testNoWindows and returns what it was.
func setNoWindows(on bool) bool {
	prev := testNoWindows
	testNoWindows = on
	return prev
}
