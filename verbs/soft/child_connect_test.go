package soft

import (
	"net"
	"time"

	"github.com/rdmanet/rdma/verbs"
)

// childQP is a peer process's QP for the tests that run one: on ch, an ID
// resolved to dst and a QP of small queues on one CQ. It returns them, or
// 4 when the QP could not be made.
func childQP(ch verbs.EventChannel, dst *net.TCPAddr) (verbs.CMID, verbs.PD, verbs.CQ, verbs.QP, int) {
	id, _ := ch.CreateID()
	_ = id.ResolveAddr(nil, dst, 5*time.Second)
	_, _ = ch.GetEvent(time.Now().Add(5 * time.Second))
	_ = id.ResolveRoute(5 * time.Second)
	_, _ = ch.GetEvent(time.Now().Add(5 * time.Second))
	ctx := id.Context()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16, nil)
	qp, err := id.CreateQP(pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, nil, nil, nil, 4
	}
	return id, pd, cq, qp, 0
}

// childConnect is a peer process's connection for the tests that kill it:
// childQP's QP with Connect sent. It returns 0, or the exit code that says
// which step failed (4: CreateQP); the caller waits for the CM's answer as
// its test needs.
func childConnect(ch verbs.EventChannel, dst *net.TCPAddr) int {
	id, _, _, _, code := childQP(ch, dst)
	if code != 0 {
		return code
	}
	_ = id.Connect(&verbs.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	return 0
}
