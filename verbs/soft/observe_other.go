//go:build !linux

package soft

import (
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// TCPInfo is Linux's only (TCP_INFO); elsewhere ok is false.
func TCPInfo(verbs.QP) (rtt time.Duration, retransmits uint64, ok bool) { return 0, 0, false }

// SwitchPending: the switch to shared memory is Linux's only.
func SwitchPending(verbs.QP) bool { return false }
