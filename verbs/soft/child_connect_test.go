package soft

import (
	"net"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// childConnect is a peer process's connection for the tests that kill it:
// on ch, an ID resolved to dst, a QP of small queues on one CQ, and
// Connect sent. It returns 0, or the exit code that says which step failed
// (4: CreateQP); the caller waits for the CM's answer as its test needs.
func childConnect(ch verbs.EventChannel, dst *net.TCPAddr) int {
	id, _ := ch.CreateID()
	_ = id.ResolveAddr(nil, dst, 5*time.Second)
	_, _ = ch.GetEvent(time.Now().Add(5 * time.Second))
	_ = id.ResolveRoute(5 * time.Second)
	_, _ = ch.GetEvent(time.Now().Add(5 * time.Second))
	ctx := id.Context()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16, nil)
	if _, err := id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return 4
	}
	_ = id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	return 0
}
