package rdma

import "github.com/rdmanet/rdma/verbs/soft"

// SoftCarrier says what carries a soft conn's bytes: "shm" or "tcp" (see
// soft.Carrier); "" on another provider.
func SoftCarrier(c *Conn) string { return soft.Carrier(c.qp) }
