package soft

import (
	"syscall"

	"github.com/rdmanet/rdma/verbs"
)

// AllocMW: memory windows are not built yet on soft.
func (p *pd) AllocMW() (verbs.MW, error) {
	return nil, verbs.Errorf("ibv_alloc_mw", syscall.EOPNOTSUPP, "soft has no memory windows")
}
