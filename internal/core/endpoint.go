package core

import "github.com/rdmanet/rdma/verbs"

// Endpoint is one connection's verbs objects, of either wire: the
// connection manager's ID and event channel, the protection domain, one
// block of registered memory with its two MRs, the completion channel,
// the CQ and the QP. Both wires create them in the same dependency order
// (DeviceOf, FitQueues, Allocate, Register, CreateQP) and release them in
// the order the verbs require (ReleaseQueues, then what the wire
// registered beside them, then ReleaseMemory); what they put in the
// memory differs. The ID and event channel are the caller's to destroy.
type Endpoint struct {
	Events verbs.EventChannel
	ID     verbs.CMID
	PD     verbs.PD
	CompCh verbs.CompChannel
	CQ     verbs.CQ
	QP     verbs.QP
	Mem    *verbs.Memory
	RingMR verbs.MR // what the peer writes into (remote write)
	SendMR verbs.MR // what this side sends from (local access)
}

// DeviceOf is the device id is bound to (route resolved, or a connect
// request) and what it grants.
func DeviceOf(id verbs.CMID) (verbs.Context, verbs.DeviceAttr, error) {
	ctx := id.Context()
	if ctx == nil {
		return nil, verbs.DeviceAttr{}, verbs.Errorf("rdma_create_qp", 0, "connection manager ID has no device")
	}
	attr, err := ctx.Query()
	return ctx, attr, err
}

// FitQueues bounds a send queue of sq WRs (plus spare ones kept beside
// them) and a receive queue of rq to what the device grants, the CQ
// holding both.
func FitQueues(attr verbs.DeviceAttr, sq, rq, spare int) (int, int) {
	if attr.MaxQPWR > 0 {
		sq, rq = min(sq, attr.MaxQPWR-spare), min(rq, attr.MaxQPWR)
	}
	if attr.MaxCQE > 0 && sq+spare+rq > attr.MaxCQE {
		sq, rq = min(sq, attr.MaxCQE/2-spare), min(rq, attr.MaxCQE/2)
	}
	return sq, rq
}

// Allocate allocates the memory block of size bytes.
func (e *Endpoint) Allocate(size int) ([]byte, error) {
	var err error
	if e.Mem, err = verbs.AllocMemory(size); err != nil {
		return nil, err
	}
	return e.Mem.Bytes(), nil
}

// Register allocates the protection domain and registers ring (the
// peer writes there) and send, parts of the block.
func (e *Endpoint) Register(ctx verbs.Context, ring, send []byte) error {
	var err error
	if e.PD, err = ctx.AllocPD(); err != nil {
		return err
	}
	if e.RingMR, err = e.PD.RegMR(ring, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return err
	}
	e.SendMR, err = e.PD.RegMR(send, verbs.AccessLocalWrite)
	return err
}

// CreateQP creates the completion channel, a CQ for both queues and the
// QP with the capacities asked for in qc, which it updates to what the
// device granted.
func (e *Endpoint) CreateQP(ctx verbs.Context, qc *verbs.QPCap) error {
	var err error
	if e.CompCh, err = ctx.CreateCompChannel(); err != nil {
		return err
	}
	if e.CQ, err = ctx.CreateCQ(qc.MaxSendWR+qc.MaxRecvWR, e.CompCh); err != nil {
		return err
	}
	qa := &verbs.QPInitAttr{SendCQ: e.CQ, RecvCQ: e.CQ, Cap: *qc}
	if e.QP, err = e.ID.CreateQP(e.PD, qa); err != nil {
		return err
	}
	*qc = qa.Cap
	return nil
}

// ReleaseQueues destroys the QP, the CQ (after acknowledging the unacked
// completion events taken and not yet acknowledged) and the completion
// channel.
func (e *Endpoint) ReleaseQueues(unacked int) {
	if e.QP != nil {
		e.QP.Destroy()
	}
	if e.CQ != nil {
		if unacked > 0 {
			e.CompCh.AckEvents(e.CQ, unacked)
		}
		e.CQ.Destroy()
	}
	if e.CompCh != nil {
		e.CompCh.Close()
	}
}

// ReleaseMemory deregisters the two MRs and frees the protection domain
// and the memory block, once no queue refers to them.
func (e *Endpoint) ReleaseMemory() {
	if e.SendMR != nil {
		e.SendMR.Dereg()
	}
	if e.RingMR != nil {
		e.RingMR.Dereg()
	}
	if e.PD != nil {
		e.PD.Dealloc()
	}
	if e.Mem != nil {
		e.Mem.Free()
	}
}
