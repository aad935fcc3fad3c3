package soft

import "github.com/rdmanet/rdma/verbs"

// Silence makes a connected QP stop answering its peer (a hung host).
func Silence(q verbs.QP) { q.(*qp).silent.Store(true) }
