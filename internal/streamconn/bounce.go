package streamconn

import (
	"github.com/rdmanet/rdma/internal/regmem"
	"github.com/rdmanet/rdma/internal/zerocopy"
	"github.com/rdmanet/rdma/verbs"
)

// rndvBounceSize is the bounce buffer's size.
const rndvBounceSize = 1 << 20

// bounceBuf is the connection's bounce buffer, made on first use.
// Reader-owned (rmu); released with the endpoint (releaseZeroCopy).
func (c rendezvous) bounceBuf() (*zerocopy.Bounce, error) {
	zc := c.regs().zeroCopy()
	if !zc.bounce.Made() {
		b, err := regmem.New(c.EP.PD, rndvBounceSize, 0, verbs.AccessLocalWrite)
		if err != nil {
			return nil, err
		}
		zc.bounce.Use(b)
	}
	return &zc.bounce, nil
}
