//go:build !linux

package soft

import (
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// RegDmaBufMR fails: dma-bufs are Linux's.
func (p *pd) RegDmaBufMR(uint64, int, uint64, int, verbs.Access) (verbs.MR, error) {
	return nil, verbs.Errorf("ibv_reg_dmabuf_mr", syscall.EOPNOTSUPP, "%s cannot register dma-bufs: they are Linux's", DeviceName)
}
