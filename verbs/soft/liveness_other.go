//go:build !linux

package soft

import "net"

// answering: without the kernel's view of the connection, every timeout
// counts, as before (liveness.go).
func (t *tcpTransport) answering() bool { return false }

func shmLiveness(transport) net.Conn { return nil }
